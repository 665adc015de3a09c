#!/usr/bin/env bash
# Runs this bundle's GPU tests and benchmarks in one go, on a machine with a
# GPU and its driver but possibly no MLIR, no compiler and no network (the
# plans were compiled where the bundle was made: bench/gpu/make-bundle.sh).
# Results go to $OUT when it is set, else to ./results beside this script;
# summary.txt lists every step and its outcome.
#
#   ./run.sh
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
results=${OUT:-$here/results}
if [[ $# -gt 0 ]]; then
  echo "run.sh: takes no arguments, got '$1'" >&2
  exit 2
fi
mkdir -p "$results"
summary=$results/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# The bundle's libraries first; then cuBLASLt, cuBLAS and NCCL from the
# machine: the CUDA toolkit, or the nvidia-* wheels of its Python.
library_path=$here/lib
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda/lib; do
  [[ -d $dir ]] && library_path=$library_path:$dir
done
if command -v python3 > /dev/null; then
  for package in cublas nccl cuda_runtime; do
    dir=$(python3 -c "import nvidia.$package as p; print(list(p.__path__)[0])" 2> /dev/null) &&
      [[ -d $dir/lib ]] && library_path=$library_path:$dir/lib
  done
fi
export LD_LIBRARY_PATH=$library_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The build machine's C++ runtime, only where the machine's own is missing
# or older than the binaries need.
if [[ -d $here/lib/fallback ]] &&
   for b in "$here"/bin/*; do ldd "$b" 2>&1; done | grep 'not found' |
     grep -qE 'libstdc\+\+|libgcc_s|GLIBCXX|CXXABI|GCC_'; then
  export LD_LIBRARY_PATH=$here/lib/fallback:$LD_LIBRARY_PATH
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}

note "== bundle: $(head -1 "$here/MANIFEST")"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi -L 2>&1 | tee "$results/gpu.txt" | sed 's/^/   /' | tee -a "$summary"
else
  note "   no nvidia-smi on this machine"
fi
missing=$(for b in "$here"/bin/*; do ldd "$b"; done | grep 'not found' | sort -u)
if [[ -n $missing ]]; then
  note "== libraries not found (LD_LIBRARY_PATH=$LD_LIBRARY_PATH):"
  note "$missing"
  exit 2
fi
status=0

# Each test binary runs every test; none may skip on a GPU machine.
for test in TriadCudaKernelsTests TriadCudaAttentionTests TriadCudaExecutorTests; do
  note "== $test"
  "$here/bin/$test" --gtest_color=no "--gtest_output=json:$results/$test.json" \
    > "$results/$test.txt" 2>&1
  code=$?
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ tests?' "$results/$test.txt" |
    sed 's/^/   /' | tee -a "$summary"
  if [[ $code != 0 ]] || grep -q '^\[  SKIPPED \]' "$results/$test.txt"; then
    note "   FAILED or skipped (exit $code): see $test.txt"
    status=1
  fi
done

# The equivalence law on the GPU: 10 f32 steps on the CPU and on the GPU
# agree within 1e-4 relative; 8 ranks sharing the GPU agree with one.
corpus=$here/data/corpus.bin
train() { # NAME PLAN OUTPUT-METRICS triad-run-args...
  local name=$1 plan=$2 metrics=$3
  shift 3
  "$here/bin/triad-run" "$plan" --data "$corpus" --steps 10 --metrics "$metrics" "$@" \
    > "$results/$name.txt" 2>&1
}
compare() { # NAME REFERENCE CANDIDATE
  if python3 "$here/compare-losses.py" --rtol 1e-4 "$2" "$3" > "$results/$1.compare.txt" 2>&1; then
    note "   $1: $(head -1 "$results/$1.compare.txt")"
  else
    note "   $1: MISMATCH (see $1.compare.txt)"
    sed 's/^/     /' "$results/$1.compare.txt" | head -5 | tee -a "$summary"
    status=1
  fi
}
note "== the equivalence law: CPU against GPU"
for model in law-gpt law-llama law-bloom; do
  plan=$here/plans/$model.plan
  if [[ ! -e $plan ]]; then
    note "   $model: no plan"; status=1; continue
  fi
  if train "$model.cpu" "$plan" "$results/$model.cpu.jsonl" &&
     train "$model.cuda" "$plan" "$results/$model.cuda.jsonl" --device cuda; then
    compare "$model" "$results/$model.cpu.jsonl" "$results/$model.cuda.jsonl"
  else
    note "   $model: triad-run failed (see $model.cpu.txt, $model.cuda.txt)"
    status=1
  fi
done
note "== one rank through NCCL (its bootstrap and device-buffer collectives)"
if train law-gpt.nccl "$here/plans/law-gpt.plan" "$results/law-gpt.nccl.jsonl" \
     --device cuda --comm nccl; then
  compare law-gpt-nccl "$results/law-gpt.cpu.jsonl" "$results/law-gpt.nccl.jsonl"
else
  note "   failed (see law-gpt.nccl.txt)"
  status=1
fi
note "== a GPU checkpoint resumed on the CPU"
plan=$here/plans/law-gpt.plan
if "$here/bin/triad-run" "$plan" --data "$corpus" --steps 5 --device cuda \
     --save "$results/ckpt" > "$results/ckpt-save.txt" 2>&1 &&
   "$here/bin/triad-run" "$plan" --data "$corpus" --steps 10 --load "$results/ckpt" \
     --metrics "$results/resumed.jsonl" > "$results/ckpt-load.txt" 2>&1; then
  grep -v '"step":[1-5],' "$results/law-gpt.cpu.jsonl" > "$results/law-gpt.cpu-6-10.jsonl"
  compare resumed "$results/law-gpt.cpu-6-10.jsonl" "$results/resumed.jsonl"
else
  note "   failed (see ckpt-save.txt, ckpt-load.txt)"
  status=1
fi
note "== 8 ranks on one GPU (dp2 x tp2 x pp2, comm=mpi) against one rank"
if ! command -v mpirun > /dev/null; then
  note "   not run: no mpirun on this machine"
  status=1
elif train law-plain.cuda "$here/plans/law-plain.plan" "$results/law-plain.cuda.jsonl" --device cuda &&
     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     mpirun --oversubscribe -np 8 "$here/bin/triad-run" "$here/plans/law-mesh.plan" \
       --data "$corpus" --steps 10 --device cuda --cuda-device 0 \
       --metrics "$results/law-mesh.cuda.jsonl" > "$results/law-mesh.cuda.txt" 2>&1; then
  compare mesh "$results/law-plain.cuda.jsonl" "$results/law-mesh.cuda.jsonl"
else
  note "   failed (see law-plain.cuda.txt, law-mesh.cuda.txt)"
  status=1
fi

# Training throughput on the larger plans, next to PyTorch on the same
# model, batch and GPU in this run: Triad f32 (TF32 off) against PyTorch f32
# (TF32 off) eager and compiled, and PyTorch's bf16 autocast for reference
# (Triad's bf16 plans do not compile yet). MFU counts 6 N + 12 L h s FLOPs
# per token against the GPU's dense peak of the precision.
note "== training throughput: Triad f32 against PyTorch (median step after 2 warm-up)"
throughput() { # NAME LAYERS HIDDEN HEADS FFN VOCAB SEQ BATCH
  local model=$1 plan=$here/plans/$1.plan
  shift
  local sizes=(--layers "$1" --hidden "$2" --heads "$3" --ffn "$4" --vocab "$5"
               --seq "$6" --batch "$7")
  [[ -e $plan ]] || { note "   $model: no plan"; status=1; return; }
  if ! "$here/bin/triad-run" "$plan" --data "$corpus" --steps 6 --device cuda \
       --metrics "$results/$model.jsonl" > "$results/$model.txt" 2>&1; then
    note "   $model: triad-run failed (see $model.txt)"; status=1; return
  fi
  : > "$results/$model.torch.jsonl"
  for variant in "f32" "f32 --compile" "bf16" "bf16 --compile"; do
    # shellcheck disable=SC2086
    if ! python3 "$here/torch_peer.py" "${sizes[@]}" --dtype $variant --warmup 2 --steps 5 \
         >> "$results/$model.torch.jsonl" 2>> "$results/$model.torch.txt"; then
      note "   $model: PyTorch $variant failed (see $model.torch.txt)"; status=1
    fi
  done
  python3 - "$results/$model.jsonl" "$results/$model.torch.jsonl" "$model" <<'PY' | tee -a "$summary"
import json, statistics, sys
triad = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][2:]
peers = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
tps = statistics.median(r["tokens_per_s"] for r in triad)
line = f"   {sys.argv[3]}: Triad f32 {tps:,.0f} tokens/s"
f32 = [p for p in peers if p["dtype"] == "f32"]
if f32:
    flops = f32[0]["model_tflops"] * 1e12 / f32[0]["tokens_per_s"]
    line += f", MFU {flops * tps / 67e12:.1%} of 67 TFLOPS f32"
print(line)
for p in peers:
    ratio = tps / p["tokens_per_s"]
    mfu = f", MFU {p['mfu']:.1%}" if p.get("mfu") is not None else ""
    print(f"     PyTorch {p['dtype']} {p['mode']}: {p['tokens_per_s']:,.0f} tokens/s{mfu}; Triad f32 / this {ratio:.2f}")
PY
}
throughput gpt2-medium-f32 24 1024 16 4096 50257 1024 8
throughput 1.3b-f32 24 2048 16 8192 50257 2048 4

# Attention forward and forward + backward, causal f32, against PyTorch's
# scaled_dot_product_attention on the same shapes (bf16 for reference).
note "== attention against PyTorch's scaled_dot_product_attention (median of 10)"
for shape in "4 16 2048 64" "8 16 1024 128"; do
  read -r b h s d <<< "$shape"
  sizes=(--batch "$b" --heads "$h" --seq "$s" --head-dim "$d")
  name=attention-$b-$h-$s-$d
  if "$here/bin/TriadAttentionBench" "${sizes[@]}" > "$results/$name.jsonl" 2> "$results/$name.txt" &&
     python3 "$here/attention_peer.py" "${sizes[@]}" >> "$results/$name.jsonl" 2>> "$results/$name.txt" &&
     python3 "$here/attention_peer.py" "${sizes[@]}" --dtype bf16 >> "$results/$name.jsonl" 2>> "$results/$name.txt"; then
    python3 - "$results/$name.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = rows[0]
print(f"   b{t['batch']} h{t['heads']} s{t['seq']} d{t['head_dim']}: Triad f32 "
      f"{t['forward_ms']:.2f} ms forward, {t['forward_backward_ms']:.2f} ms both")
for p in rows[1:]:
    print(f"     {p['impl']} {p['dtype']}: {p['forward_ms']:.2f} / "
          f"{p['forward_backward_ms']:.2f} ms; Triad f32 takes "
          f"{t['forward_backward_ms'] / p['forward_backward_ms']:.2f}x its time")
PY
  else
    note "   $name: failed (see $name.txt)"
    status=1
  fi
done

note "== done: $([[ $status == 0 ]] && echo all passed || echo something failed or did not run)"
exit $status
