#!/usr/bin/env bash
# Runs this bundle's GPU tests and benchmarks in one go, on a machine with a
# GPU and its driver but possibly no MLIR, no compiler and no network (the
# plans were compiled where the bundle was made: bench/gpu/make-bundle.sh).
# Results go to $OUT when it is set, else to ./results beside this script;
# summary.txt lists every step and its outcome.
#
#   ./run.sh [STEP...]
#
# STEP is one of tests, law, kernels, profile, throughput, nccl,
# checkpoint, mesh, attention (default: all, in that order: what the
# lent machine's short lease most needs first; the last four re-check what
# has passed on a GPU before). TRIAD_BUNDLE_MODELS picks the throughput
# models (default: "1.3b-bf16 1.3b-bf16-v128 gpt2-medium-bf16"; also
# 1.3b-bf16-unfused, gpt2-medium-bf16-v128 and the f32 plans
# gpt2-medium-f32 and 1.3b-f32); TRIAD_BUNDLE_VARIANTS the runs of the
# first of them with one of triad-run's GPU flags (default: "gelu-dgelu
# gelu-kernels candidates-8"; also triad-attention and graphs);
# TRIAD_BUNDLE_PROFILE the profiled models (default: the first model);
# TRIAD_BUNDLE_PRECISIONS the matmul precisions triad-run trains f32 plans
# in (default: "f32 tf32 bf16"; the profile takes the first and the last;
# a bf16 plan runs once); TRIAD_BUNDLE_PEERS the PyTorch variants beside
# them, comma-separated torch_peer.py arguments (default: "f32,f32
# --matmul-precision tf32,bf16,bf16 --compile" beside an f32 plan, "bf16"
# beside a bf16 one, "bf16,bf16 --compile" to add torch.compile's);
# TRIAD_BUNDLE_SECONDS is the deadline after which no step starts (default
# 420: set it about 45 s under the command's own time limit).
#
# Exit status: 0 when every step passed; 3 when every step that needs no GPU
# passed and every one that needs a GPU failed only for want of one (what
# bench/gpu/rehearse.sh expects on a machine without a GPU); 2 when a
# library is missing; 1 otherwise.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
results=${OUT:-$here/results}
all_steps="tests law kernels profile throughput nccl checkpoint mesh attention"
steps=${*:-$all_steps}
for step in $steps; do
  [[ " $all_steps " == *" $step "* ]] || {
    echo "run.sh: unknown step '$step' (steps: $all_steps)" >&2
    exit 2
  }
done
models=${TRIAD_BUNDLE_MODELS:-1.3b-bf16 1.3b-bf16-v128 gpt2-medium-bf16}
variants=${TRIAD_BUNDLE_VARIANTS-gelu-dgelu gelu-kernels candidates-8}
for variant in $variants; do
  [[ " triad-attention gelu-dgelu gelu-kernels candidates-8 graphs " == *" $variant "* ]] || {
    echo "run.sh: unknown variant '$variant' in TRIAD_BUNDLE_VARIANTS (triad-attention, gelu-dgelu, gelu-kernels, candidates-8 or graphs)" >&2
    exit 2
  }
done
profiled_models=${TRIAD_BUNDLE_PROFILE:-${models%% *}}
precisions=${TRIAD_BUNDLE_PRECISIONS:-f32 tf32 bf16}
# The PyTorch peers of the throughput step, separated by commas.
IFS=, read -r -a f32_peers <<< "${TRIAD_BUNDLE_PEERS:-f32,f32 --matmul-precision tf32,bf16,bf16 --compile}"
# (torch.compile's peer takes a minute or more to compile: beside a bf16
# plan it runs where TRIAD_BUNDLE_PEERS names it, "bf16,bf16 --compile".)
IFS=, read -r -a bf16_peers <<< "${TRIAD_BUNDLE_PEERS:-bf16}"
for precision in $precisions; do
  [[ " f32 tf32 bf16 " == *" $precision "* ]] || {
    echo "run.sh: unknown matmul precision '$precision' in TRIAD_BUNDLE_PRECISIONS (f32, tf32 or bf16)" >&2
    exit 2
  }
done
mkdir -p "$results"
summary=$results/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# The bundle's libraries first; then cuBLASLt, cuBLAS, NCCL and the CUDA
# runtime from the machine: the CUDA toolkit, or the nvidia-* wheels of its
# Python (CUDA 12 wheels keep them in nvidia/<library>/lib, CUDA 13 wheels in
# nvidia/cu13/lib), or PyTorch's own lib folder. cuDNN and NVRTC likewise:
# the CUDA backend loads libcudnn.so.9 at run time for its fused attention
# (nvidia-cudnn-cu13 keeps it in nvidia/cudnn/lib), whose kernels NVRTC
# compiles; without them attention runs Triad's own kernels.
library_path=$here/lib
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda/lib; do
  [[ -d $dir ]] && library_path=$library_path:$dir
done
if command -v python3 > /dev/null; then
  while read -r dir; do
    library_path=$library_path:$dir
  done < <(python3 - 2> /dev/null <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = []
for root in roots:
    for name in ("libcublasLt.so.1[0-9]", "libnccl.so.2", "libcudart.so.1[0-9]",
                 "libcudnn.so.9", "libnvrtc.so.1[0-9]"):
        for pattern in ("nvidia/*/lib/", "nvidia/cu1[0-9]/lib/", "torch/lib/"):
            for path in glob.glob(os.path.join(root, pattern + name)):
                folder = os.path.dirname(os.path.realpath(path))
                if folder not in seen:
                    seen.append(folder)
print("\n".join(seen))
PY
  )
fi
export LD_LIBRARY_PATH=$library_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The build machine's C++ runtime, only where the machine's own is missing
# or older than the binaries need.
if [[ -d $here/lib/fallback ]] &&
   for b in "$here"/bin/*; do ldd "$b" 2>&1; done | grep 'not found' |
     grep -qE 'libstdc\+\+|libgcc_s|GLIBCXX|CXXABI|GCC_'; then
  export LD_LIBRARY_PATH=$here/lib/fallback:$LD_LIBRARY_PATH
fi
# mpirun: the Open MPI the bundle carries (Debian's, the one triad-run was
# linked with, relocated with OPAL_PREFIX; its PMIx finds its plugins the
# same way), else the machine's own, which may be another MPI or version
# than the library the binaries load.
mpirun=
if [[ -x $here/openmpi/bin/mpirun ]]; then
  mpirun=$here/openmpi/bin/mpirun
  export OPAL_PREFIX=$here/openmpi
  export PMIX_PREFIX=$here/openmpi/lib/x86_64-linux-gnu/pmix2
  export PMIX_INSTALL_PREFIX=$PMIX_PREFIX
  export PMIX_MCA_mca_base_component_path=$PMIX_PREFIX/lib/pmix
  export PATH=$here/openmpi/bin:$PATH
  export OPENMPI_LIBRARY_PATH=$here/openmpi/lib/x86_64-linux-gnu/openmpi/lib:$PMIX_PREFIX/lib:$here/openmpi/deps
else
  mpirun=$(command -v mpirun || true)
fi
# Every step runs under a time box, and no step starts past the deadline
# (TRIAD_BUNDLE_SECONDS, default 420), so that one command fits a lease.
start_seconds=$SECONDS
deadline=${TRIAD_BUNDLE_SECONDS:-420}
boxed() { # SECONDS COMMAND...: the command, killed after SECONDS or at the deadline
  local limit=$1 left=$((deadline - (SECONDS - start_seconds)))
  shift
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "not started: the bundle's deadline of $deadline s has passed" >&2
    return 124
  fi
  timeout -k 5 "$limit" "$@"
}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}
# A benchmark's one GPU process draws its model's initial weights on the
# host (OpenMP), which it does on every core: the 1.3 B runs of 2026-11-27
# spent about 38 of their 40 s before the first step, on 4 threads. The
# CPU runs of the law keep the 4 threads above.
gpu_host_threads=$(nproc 2>/dev/null || echo 4)

# Outcomes. status: 1 once anything failed for a reason other than the want
# of a GPU; no_gpu: 1 once a GPU step failed only for want of one.
status=0
no_gpu=0
no_gpu_pattern='this machine has no GPU|no CUDA device on this machine'
# failed NAME LOG...: a failed step, told apart by its logs: the no-GPU
# error, or a real failure.
failed() {
  local name=$1 line
  shift
  line=$(cat "$@" 2> /dev/null | grep -m1 -E "$no_gpu_pattern")
  if [[ -n $line && $have_gpu == no ]]; then
    note "   $name: no GPU (${line#triad-run: error: })"
    no_gpu=1
  else
    note "   $name: FAILED (see $(for f in "$@"; do basename "$f"; done | tr '\n' ' ' | sed 's/ $//'))"
    [[ -n $line ]] && note "     found no GPU, though nvidia-smi lists one: $line"
    status=1
  fi
}

note "== bundle: $(head -1 "$here/MANIFEST")"
have_gpu=no
if command -v nvidia-smi > /dev/null; then
  { nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    nvidia-smi | grep -o 'CUDA Version: [0-9.]*'
  } 2>&1 | tee "$results/gpu.txt" | sed 's/^/   /' | tee -a "$summary"
  grep -q '^GPU [0-9]' "$results/gpu.txt" && have_gpu=yes
else
  note "   no nvidia-smi on this machine"
fi
missing=$(for b in "$here"/bin/*; do ldd "$b"; done | grep 'not found' | sort -u)
if [[ -n $missing ]]; then
  note "== libraries not found (LD_LIBRARY_PATH=$LD_LIBRARY_PATH):"
  note "$missing"
  exit 2
fi
note "   libraries: $(ldd "$here/bin/triad-run" | grep -E 'cublasLt|nccl|cudart|libmpi\.' | awk '{print $3}' | tr '\n' ' ')"
# Loaded at run time (dlopen), so not in ldd's list: the first on the path.
for library in libcudnn.so.9 libnvrtc.so.13; do
  found=
  IFS=: read -r -a dirs <<< "$LD_LIBRARY_PATH"
  for dir in "${dirs[@]}"; do
    [[ -n $dir && -e $dir/$library ]] && { found=$dir/$library; break; }
  done
  [[ -z $found ]] && found=$(ldconfig -p 2> /dev/null | awk -v l="$library" '$1 == l { print $NF; exit }')
  note "   $library: ${found:-not found}"
done
note "   mpirun: ${mpirun:-none}"
command -v python3 > /dev/null || note "   no python3 on this machine: the loss comparisons and PyTorch peers cannot run"

# The four test binaries: every CUDA kernel against its CPU kernel, the
# attention, rope and dropout kernels, cuDNN's fused attention against
# Triad's, the CUDA executor against the CPU executor (gtest_outcome.py
# tells passes, skips for want of a GPU and failures apart).
step_tests() {
  local test code line
  for test in TriadCudaKernelsTests TriadCudaAttentionTests TriadCudnnAttentionTests \
              TriadCudaExecutorTests; do
    boxed 240 "$here/bin/$test" --gtest_color=no "--gtest_output=json:$results/$test.json" \
      > "$results/$test.txt" 2>&1
    line=$(python3 "$here/gtest_outcome.py" "$results/$test.txt" --gpu "$have_gpu")
    code=$?
    note "== $test: $line"
    case $code in
      0) ;;
      3) no_gpu=1 ;;
      *) status=1
         grep -E '^\[  FAILED  \] [A-Za-z]' "$results/$test.txt" | sort -u | head -20 |
           sed 's/^/     /' | tee -a "$summary" ;;
    esac
  done
}

# The equivalence law on the GPU: 10 f32 steps on the CPU and on the GPU
# agree within 1e-4 relative; 8 ranks sharing the GPU agree with one.
corpus=$here/data/corpus.bin
train() { # NAME PLAN OUTPUT-METRICS triad-run-args...
  local name=$1 plan=$2 metrics=$3
  shift 3
  boxed 90 "$here/bin/triad-run" "$plan" --data "$corpus" --steps 10 --metrics "$metrics" "$@" \
    > "$results/$name.txt" 2>&1
}
compare() { # NAME REFERENCE CANDIDATE [TOLERANCE]
  if python3 "$here/compare-losses.py" --rtol "${4:-1e-4}" "$2" "$3" > "$results/$1.compare.txt" 2>&1; then
    note "   $1: $(head -1 "$results/$1.compare.txt")"
  else
    note "   $1: MISMATCH (see $1.compare.txt)"
    sed 's/^/     /' "$results/$1.compare.txt" | head -5 | tee -a "$summary"
    status=1
  fi
}
# cpu_train NAME PLAN: the CPU's losses on a plan (a real failure if not).
cpu_train() {
  [[ -s $results/$1.cpu.jsonl ]] && return 0
  train "$1.cpu" "$2" "$results/$1.cpu.jsonl" || {
    failed "$1 on the CPU" "$results/$1.cpu.txt"
    return 1
  }
}
step_law() {
  note "== the equivalence law: CPU against GPU"
  local model plan
  for model in law-gpt law-llama law-bloom law-gpt-padded; do
    plan=$here/plans/$model.plan
    [[ -e $plan ]] || { note "   $model: FAILED (no plan)"; status=1; continue; }
    cpu_train "$model" "$plan" || continue
    if train "$model.cuda" "$plan" "$results/$model.cuda.jsonl" --device cuda; then
      compare "$model" "$results/$model.cpu.jsonl" "$results/$model.cuda.jsonl"
    else
      failed "$model" "$results/$model.cuda.txt"
    fi
  done
  # 16-bit plans: the GPU rounds each kernel's result to 16 bits as the CPU
  # does, but its f32 sums run in another order, so a result near a
  # rounding boundary may round the other way: within 1e-2 (as meshes in
  # 16 bits, test/e2e/mixed-precision.test). f16 steps skipped for
  # overflow must be the same ones (compare-losses.py checks).
  local dtype_plan
  for dtype_plan in law-gpt-bf16 law-gpt-f16 law-gpt-f16-skips; do
    plan=$here/plans/$dtype_plan.plan
    if [[ ! -e $plan ]]; then
      note "   $dtype_plan: FAILED (no plan)"
      status=1
    elif cpu_train "$dtype_plan" "$plan"; then
      if train "$dtype_plan.cuda" "$plan" "$results/$dtype_plan.cuda.jsonl" --device cuda; then
        compare "$dtype_plan" "$results/$dtype_plan.cpu.jsonl" "$results/$dtype_plan.cuda.jsonl" 1e-2
      else
        failed "$dtype_plan" "$results/$dtype_plan.cuda.txt"
      fi
    fi
  done
  local precision
  cpu_train law-gpt "$here/plans/law-gpt.plan" || return
  # The initial values drawn on the host and copied (--cuda-init host; the
  # runs above draw them on the GPU): the CPU's bit for bit.
  if train law-gpt.host-init "$here/plans/law-gpt.plan" "$results/law-gpt.host-init.jsonl" \
       --device cuda --cuda-init host; then
    compare law-gpt-host-init "$results/law-gpt.cpu.jsonl" "$results/law-gpt.host-init.jsonl"
  else
    failed law-gpt-host-init "$results/law-gpt.host-init.txt"
  fi
  # Tensor-core products (--matmul-precision): no longer within 1e-4, but
  # the same training within the rounding of their operands.
  for precision in tf32 bf16; do
    if train "law-gpt.$precision" "$here/plans/law-gpt.plan" "$results/law-gpt.$precision.jsonl" \
         --device cuda --matmul-precision "$precision"; then
      compare "law-gpt-$precision-matmuls" "$results/law-gpt.cpu.jsonl" \
        "$results/law-gpt.$precision.jsonl" 5e-2
    else
      failed "law-gpt-$precision-matmuls" "$results/law-gpt.$precision.txt"
    fi
  done
}

step_nccl() {
  note "== one rank through NCCL (its bootstrap and device-buffer collectives)"
  cpu_train law-gpt "$here/plans/law-gpt.plan" || return
  if train law-gpt.nccl "$here/plans/law-gpt.plan" "$results/law-gpt.nccl.jsonl" \
       --device cuda --comm nccl; then
    compare law-gpt-nccl "$results/law-gpt.cpu.jsonl" "$results/law-gpt.nccl.jsonl"
  else
    failed law-gpt-nccl "$results/law-gpt.nccl.txt"
  fi
  # The bf16 plan of step_law: NCCL widens 16-bit tensors, reduces them in
  # f32 and rounds once, as MPI's staging does, so it trains as the GPU
  # does over MPI: against the CPU within step_law's 16-bit tolerance.
  local plan=$here/plans/law-gpt-bf16.plan
  if [[ ! -e $plan ]]; then
    note "   law-gpt-bf16-nccl: FAILED (no plan)"
    status=1
  elif cpu_train law-gpt-bf16 "$plan"; then
    if train law-gpt-bf16.nccl "$plan" "$results/law-gpt-bf16.nccl.jsonl" \
         --device cuda --comm nccl; then
      compare law-gpt-bf16-nccl "$results/law-gpt-bf16.cpu.jsonl" \
        "$results/law-gpt-bf16.nccl.jsonl" 1e-2
    else
      failed law-gpt-bf16-nccl "$results/law-gpt-bf16.nccl.txt"
    fi
  fi
}

step_checkpoint() {
  note "== a GPU checkpoint resumed on the CPU"
  local plan=$here/plans/law-gpt.plan
  cpu_train law-gpt "$plan" || return
  if ! boxed 60 "$here/bin/triad-run" "$plan" --data "$corpus" --steps 5 --device cuda \
       --save "$results/ckpt" > "$results/ckpt-save.txt" 2>&1; then
    failed "saving on the GPU" "$results/ckpt-save.txt"
  elif ! boxed 60 "$here/bin/triad-run" "$plan" --data "$corpus" --steps 10 --load "$results/ckpt" \
       --metrics "$results/resumed.jsonl" > "$results/ckpt-load.txt" 2>&1; then
    failed "resuming on the CPU" "$results/ckpt-load.txt"
  else
    grep -v '"step":[1-5],' "$results/law-gpt.cpu.jsonl" > "$results/law-gpt.cpu-6-10.jsonl"
    compare resumed "$results/law-gpt.cpu-6-10.jsonl" "$results/resumed.jsonl"
  fi
}

# mesh8 DEVICE STEPS SECONDS triad-run-args...: law-mesh on 8 ranks.
mesh8() {
  local device=$1 steps=$2 limit=$3
  shift 3
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    LD_LIBRARY_PATH=${OPENMPI_LIBRARY_PATH:+$OPENMPI_LIBRARY_PATH:}$LD_LIBRARY_PATH \
    boxed "$limit" "$mpirun" --oversubscribe -np 8 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS \
    "$here/bin/triad-run" "$here/plans/law-mesh.plan" --data "$corpus" --steps "$steps" \
    --device "$device" --metrics "$results/law-mesh.$device.jsonl" "$@" \
    > "$results/law-mesh.$device.txt" 2>&1
}

step_mesh() {
  note "== 8 ranks on one GPU (dp2 x tp2 x pp2, comm=mpi) against one rank"
  if [[ -z $mpirun ]]; then
    note "   mesh: FAILED (no mpirun on this machine, and the bundle carries no Open MPI)"
    status=1
    return
  fi
  # Eight processes share the GPU: a compute mode other than Default (one
  # process at a time, as managed clusters often set) cannot run them.
  local mode
  mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2> /dev/null | head -1)
  if [[ $have_gpu == yes && -n $mode && $mode != Default ]]; then
    note "   not run: the GPU's compute mode is $mode, which lets one process at a time use it"
    return
  fi
  # MPI alone first: the same job on the CPU.
  if mesh8 cpu 3 30; then
    note "   8 ranks on the CPU under $(basename "$(dirname "$(dirname "$mpirun")")")'s mpirun: trained"
  else
    failed "8 ranks on the CPU (MPI alone)" "$results/law-mesh.cpu.txt"
    return
  fi
  if ! train law-plain.cuda "$here/plans/law-plain.plan" "$results/law-plain.cuda.jsonl" --device cuda; then
    failed "law-plain on one GPU rank" "$results/law-plain.cuda.txt"
  elif ! mesh8 cuda 10 60 --cuda-device 0; then
    failed "8 ranks on the GPU" "$results/law-mesh.cuda.txt"
  else
    compare mesh "$results/law-plain.cuda.jsonl" "$results/law-mesh.cuda.jsonl"
  fi
}

# Attention forward and forward + backward, causal f32, against PyTorch's
# scaled_dot_product_attention on the same shapes (bf16 for reference).
step_attention() {
  note "== attention against PyTorch's scaled_dot_product_attention (causal, median of 10)"
  local shape b h s d name sizes products ok
  for shape in "4 16 2048 64" "8 16 1024 128" "4 16 2048 128"; do
    read -r b h s d <<< "$shape"
    sizes=(--batch "$b" --heads "$h" --seq "$s" --head-dim "$d")
    name=attention-$b-$h-$s-$d
    : > "$results/$name.jsonl"
    ok=1
    for products in f32 bf16; do
      boxed 60 "$here/bin/TriadAttentionBench" "${sizes[@]}" --products "$products" \
        >> "$results/$name.jsonl" 2>> "$results/$name.txt" || ok=0
    done
    if [[ $ok == 0 ]]; then
      failed "$name" "$results/$name.txt"
      continue
    fi
    # bf16 tensors, as a bf16 plan holds them: Triad's typed kernels and
    # cuDNN's fused attention (--cuda-attention's routes).
    for route in triad cudnn; do
      boxed 60 "$here/bin/TriadAttentionBench" "${sizes[@]}" --products bf16 \
        --storage 16 --route "$route" >> "$results/$name.jsonl" 2>> "$results/$name.txt" ||
        failed "$name ($route on bf16 tensors)" "$results/$name.txt"
    done
    if ! boxed 60 python3 "$here/attention_peer.py" "${sizes[@]}" >> "$results/$name.jsonl" 2>> "$results/$name.txt" ||
       ! boxed 60 python3 "$here/attention_peer.py" "${sizes[@]}" --dtype bf16 >> "$results/$name.jsonl" 2>> "$results/$name.txt"; then
      failed "$name (PyTorch)" "$results/$name.txt"
      continue
    fi
    python3 - "$results/$name.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = rows[0]
# Causal: half the scores; the backward's products are 2.5 times the
# forward's (dV, dP, dQ, dK against S, P . V).
forward_flops = 2 * 2 * t["batch"] * t["heads"] * t["seq"] ** 2 * t["head_dim"] / 2
both_flops = 3.5 * forward_flops
print(f"   b{t['batch']} h{t['heads']} s{t['seq']} d{t['head_dim']} "
      f"(forward / forward + backward, ms, and TFLOP/s of both):")
# Triad's routes: "triad" (f32 tensors, products of the dtype),
# "triad-typed" and "cudnn" (tensors of the dtype).
ours = ("triad", "triad-typed", "cudnn")
for r in rows:
    line = (f"     {r['impl']:<24} {r['dtype']:<5} {r['forward_ms']:8.3f} / "
            f"{r['forward_backward_ms']:8.3f} ms  "
            f"{both_flops / r['forward_backward_ms'] / 1e9:7.1f} TFLOP/s")
    if r["impl"] not in ours:
        ratios = [f"{t['forward_backward_ms'] / r['forward_backward_ms']:.2f}x ({t['impl']})"
                  for t in rows if t["impl"] in ours and t["dtype"] == r["dtype"]]
        if ratios:
            line += "; Triad takes " + ", ".join(ratios) + " its time"
    print(line)
PY
  done
}

# The sizes of a throughput model (triad-gen's options of its plan).
sizes_of() {
  case $1 in
    gpt2-medium-*) echo 24 1024 16 4096 50257 1024 8 ;;
    1.3b-*) echo 24 2048 16 8192 50257 2048 4 ;;
    *) return 1 ;;
  esac
}

# Training throughput on the larger plans, next to PyTorch on the same
# model, batch and GPU in this run: Triad f32 (TF32 off) against PyTorch f32
# (TF32 off) eager, and PyTorch's bf16 autocast eager and compiled for
# reference (TRIAD_BUNDLE_MODELS may name Triad's bf16 plans too). MFU
# counts 6 N + 12 L h s FLOPs per token against the GPU's dense peak of the
# precision.
# Beside Triad's tokens/s: its launches per step (kernels, cuBLASLt
# products, copies, NCCL calls) and the host's milliseconds per step in the
# executor's calls (not waiting for the GPU), medians of the same steps.
throughput() { # NAME LAYERS HIDDEN HEADS FFN VOCAB SEQ BATCH
  local model=$1 plan=$here/plans/$1.plan
  shift
  local sizes=(--layers "$1" --hidden "$2" --heads "$3" --ffn "$4" --vocab "$5"
               --seq "$6" --batch "$7")
  [[ -e $plan ]] || { note "   $model: FAILED (no plan)"; status=1; return; }
  local began precision variant ran=0 labels=$precisions base=
  # A variant of a model (a name beyond -f32 or -bf16: gpt2-medium-bf16-v128,
  # 1.3b-bf16-unfused) runs once, without the variants and the peers below,
  # against its model's run and peers.
  [[ $model != *-f32 && $model != *-bf16 ]] && base=${model%-*}
  # A 16-bit plan's products are of its type whatever --matmul-precision
  # says: it runs once, in the first precision.
  [[ $model == *-bf16* ]] && labels=${precisions%% *}
  for precision in $labels; do
    began=$SECONDS
    local what="$precision matmuls"
    [[ $model == *-bf16* ]] && what="bf16 plan"
    if ! boxed 150 env OMP_NUM_THREADS="$gpu_host_threads" "$here/bin/triad-run" "$plan" --data "$corpus" --steps 6 --device cuda \
         --matmul-precision "$precision" --metrics "$results/$model.$precision.jsonl" \
         > "$results/$model.$precision.txt" 2>&1; then
      failed "$model ($what)" "$results/$model.$precision.txt"
      continue
    fi
    ran=1
    note "   $model, $what: triad-run took $((SECONDS - began)) s in all ($(grep -o 'trained steps.*in [0-9.]* s' "$results/$model.$precision.txt"))"
    # Where its start-up went (triad-run's "ready in" line).
    grep -o 'ready in .*' "$results/$model.$precision.txt" | sed 's/^/     /' | tee -a "$summary" || true
  done
  # Variants of a run: LABEL, what it is, and triad-run's extra flags.
  variant() {
    local label=$1 what=$2
    shift 2
    began=$SECONDS
    if boxed 150 env OMP_NUM_THREADS="$gpu_host_threads" "$here/bin/triad-run" "$plan" --data "$corpus" --steps 6 --device cuda \
         "$@" --metrics "$results/$model.$label.jsonl" > "$results/$model.$label.txt" 2>&1; then
      ran=1
      labels="$labels $label"
      note "   $model, $what: triad-run took $((SECONDS - began)) s in all ($(grep -o 'trained steps.*in [0-9.]* s' "$results/$model.$label.txt"))"
      # The calls it could not record, and why (none is expected).
      grep -- '--cuda-graphs:' "$results/$model.$label.txt" | sed 's/^/     /' | tee -a "$summary" || true
    else
      failed "$model ($what)" "$results/$model.$label.txt"
    fi
  }
  local peers_file=$results/$model.torch.jsonl
  if [[ -n $base ]]; then
    peers_file=$results/$base.torch.jsonl
  else
    # The first model's variants (TRIAD_BUNDLE_VARIANTS), each a run in the
    # first precision with one of triad-run's GPU flags:
    # - triad-attention: attention on Triad's own kernels (the default,
    #   --cuda-attention=auto, runs cuDNN's fused attention where cuDNN
    #   takes it: a 16-bit plan's);
    # - gelu-dgelu, gelu-kernels: the GELU's gradient products in cuBLASLt's
    #   DGELU epilogue with the bias gradient by Triad's column sum, or as
    #   the product and Triad's kernels (the default, DGELU_BGRAD, ran at
    #   282 TFLOP/s at 1.3 B on 2026-11-27 where the plain product ran at
    #   about 790);
    # - candidates-8: the fastest of cuBLASLt's first 8 algorithms for each
    #   product shape;
    # - graphs: each call recorded once as a CUDA graph and replayed
    #   (launches and host time per step against the run kernel by kernel).
    local first=${precisions%% *} kind=${precisions%% *} v
    [[ $model == *-bf16* ]] && kind="bf16 plan"
    if [[ $model == "${models%% *}" ]]; then
      for v in $variants; do
        case $v in
          triad-attention) variant triad-attention "$kind, Triad's attention" \
            --matmul-precision "$first" --cuda-attention triad ;;
          gelu-dgelu) variant gelu-dgelu "$kind, --cuda-gelu-grad dgelu" \
            --matmul-precision "$first" --cuda-gelu-grad dgelu ;;
          gelu-kernels) variant gelu-kernels "$kind, --cuda-gelu-grad kernels" \
            --matmul-precision "$first" --cuda-gelu-grad kernels ;;
          candidates-8) variant candidates-8 "$kind, --cuda-matmul-candidates 8" \
            --matmul-precision "$first" --cuda-matmul-candidates 8 ;;
          graphs) variant "graphs-$first" "$kind, CUDA graphs" \
            --matmul-precision "$first" --cuda-graphs ;;
        esac
      done
    fi
    ((ran)) || return 0 # the peers only beside a Triad run
    : > "$peers_file"
    local peers=("${f32_peers[@]}")
    [[ $model == *-bf16 ]] && peers=("${bf16_peers[@]}")
    for variant in "${peers[@]}"; do
      # shellcheck disable=SC2086
      if ! boxed 120 python3 "$here/torch_peer.py" "${sizes[@]}" --dtype $variant --warmup 2 --steps 5 \
           >> "$peers_file" 2>> "$results/$model.torch.txt"; then
        failed "$model: PyTorch $variant" "$results/$model.torch.txt"
      fi
    done
  fi
  ((ran)) || return 0
  # shellcheck disable=SC2086
  python3 - "$results/$model" "$model" "$peers_file" "${base:+$results/$base.${precisions%% *}.jsonl}" \
    $labels <<'PY' | tee -a "$summary"
import json, os, statistics, sys
prefix, model, peers_file, base_run = sys.argv[1:5]
precisions = sys.argv[5:]
# A variant run's label names its flag; it ran in the first precision.
flagged = {"triad-attention": "Triad's attention",
           "gelu-dgelu": "--cuda-gelu-grad dgelu",
           "gelu-kernels": "--cuda-gelu-grad kernels",
           "candidates-8": "--cuda-matmul-candidates 8"}
def label(precision):
    """What a run is: its matmul precision, or a bf16 plan's (with a flag
    of triad-run's: "triad-attention", "gelu-*", "candidates-8"; with CUDA
    graphs: "graphs-" and the precision)."""
    if precision in flagged:
        return label(precisions[0]) + ", " + flagged[precision]
    if precision.startswith("graphs-"):
        return label(precision[len("graphs-"):]) + ", CUDA graphs"
    return "bf16 plan" if "-bf16" in model else f"{precision} matmuls"
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
peers = rows(peers_file)
# The model's FLOPs per token, from the peer (6 N + 12 L h s); the dense
# peaks of an H100 or H200 by the products' precision.
flops = next((p["model_tflops"] * 1e12 / p["tokens_per_s"] for p in peers), None)
peak = {"f32": 67e12, "tf32": 494.7e12, "bf16": 989e12}
ours = {}
for precision in precisions:
    steps = rows(f"{prefix}.{precision}.jsonl")[2:]
    if not steps:
        continue
    tps = ours[precision] = statistics.median(r["tokens_per_s"] for r in steps)
    # A bf16 plan's products are bf16 whatever --matmul-precision says.
    kind = ("bf16" if "-bf16" in model else precisions[0] if precision in flagged
            else precision.removeprefix("graphs-"))
    line = f"   {model}: Triad, {label(precision)}: {tps:,.0f} tokens/s"
    if flops:
        line += f", MFU {flops * tps / peak[kind]:.1%} of {peak[kind] / 1e12:g} TFLOPS {kind}"
    # The host's side of the same steps (triad-run's metrics): the device
    # work it issued (kernel launches, cuBLASLt products, copies, NCCL
    # calls) and its time in the executor's calls, not waiting for the GPU.
    if all("launches" in r and "host_seconds" in r for r in steps):
        launches = statistics.median(r["launches"] for r in steps)
        host_ms = 1e3 * statistics.median(r["host_seconds"] for r in steps)
        step_ms = 1e3 * statistics.median(r["step_seconds"] for r in steps)
        line += (f"; {launches:,.0f} launches/step, host {host_ms:,.1f} ms/step"
                 f" (of {step_ms:,.1f})")
    # A variant against the same plan's run without its flag.
    if (precision in flagged or precision.startswith("graphs-")) and precisions[0] in ours:
        line += f"; {tps / ours[precisions[0]]:.3f}x the tokens/s without the flag"
    print(line)
# A variant against its model's run (the same steps' median).
base_steps = rows(base_run)[2:] if base_run else []
if base_steps and ours:
    base_tps = statistics.median(r["tokens_per_s"] for r in base_steps)
    first = next(iter(ours.values()))
    print(f"     {first / base_tps:.3f}x the tokens/s of "
          f"{os.path.basename(base_run).rsplit('.', 2)[0]} ({base_tps:,.0f})")
for p in peers:
    mfu = f", MFU {p['mfu']:.1%}" if p.get("mfu") is not None else ""
    what = p["dtype"] + (" (TF32 matmuls)" if p.get("matmul_precision") == "tf32" else "")
    ratios = ", ".join(
        f"Triad {label(k)} / this {v / p['tokens_per_s']:.2f}"
        for k, v in ours.items())
    print(f"     PyTorch {what} {p['mode']}: {p['tokens_per_s']:,.0f} tokens/s{mfu}; {ratios}")
PY
}

# The memory-bound kernels (element-wise, norms, reductions, the loss) on
# one layer's shapes of the 1.3 B model in bf16, against the same
# operations in PyTorch, as GB/s of the bytes each must move.
step_kernels() {
  note "== memory-bound kernels against PyTorch (bf16, 1.3 B layer shapes, median of 20)"
  local name=kernels
  : > "$results/$name.jsonl"
  if ! boxed 120 "$here/bin/TriadKernelBench" >> "$results/$name.jsonl" 2>> "$results/$name.txt"; then
    failed "$name" "$results/$name.txt"
    return
  fi
  if ! boxed 120 python3 "$here/kernel_peer.py" >> "$results/$name.jsonl" 2>> "$results/$name.txt"; then
    failed "$name (PyTorch)" "$results/$name.txt"
    return
  fi
  python3 - "$results/$name.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = {r["kernel"]: r for r in rows if r["impl"] != "triad"}
print(f"   {'kernel':<22} {'shape':<12} {'Triad ms':>9} {'GB/s':>7} {'PyTorch ms':>11} {'GB/s':>7}  Triad's time / PyTorch's")
for r in rows:
    if r["impl"] != "triad":
        continue
    p = peer.get(r["kernel"])
    line = (f"   {r['kernel']:<22} {r['shape']:<12} {r['ms']:9.3f} "
            f"{r['bytes'] / r['ms'] / 1e6:7.0f}")
    if p:
        line += (f" {p['ms']:11.3f} {p['bytes'] / p['ms'] / 1e6:7.0f}  "
                 f"{r['ms'] / p['ms']:.2f}x")
    print(line)
PY
}

step_throughput() {
  note "== training throughput: Triad against PyTorch (median step after 2 warm-up)"
  local model
  for model in $models; do
    # shellcheck disable=SC2046
    throughput "$model" $(sizes_of "$model") || { note "   $model: FAILED (unknown model)"; status=1; }
  done
}

# Where Triad's step goes: the instructions of steps 2 and 3 (step 1 loads
# the kernels and picks cuBLASLt's algorithms: its first product of a shape
# can take 100 times longer), each timed on the GPU (--trace-device: CUDA
# events around its work, nothing waited for), summed by opcode, and the
# products by shape (with the TFLOP/s each reached), and how much of each
# step's device work the GPU's compute stream was busy (the rest: waiting
# for the host or for communication),
# in the first and the last matmul precision.
step_profile() {
  note "== profile: Triad's instructions by opcode (3 steps, each instruction timed on the GPU)"
  local model plan precision name
  for model in $profiled_models; do
    plan=$here/plans/$model.plan
    [[ -e $plan ]] || { note "   $model: FAILED (no plan)"; status=1; continue; }
    local profiled
    profiled=$(echo "$precisions" | awk '{print $1; if (NF > 1) print $NF}')
    [[ $model == *-bf16* ]] && profiled=${precisions%% *}
    for precision in $profiled; do
      name=$model.$precision
      if ! boxed 150 env OMP_NUM_THREADS="$gpu_host_threads" "$here/bin/triad-run" "$plan" --data "$corpus" --steps 3 --device cuda \
           --matmul-precision "$precision" --trace "$results/$name.trace.json" \
           --trace-device > "$results/$name.profile.txt" 2>&1; then
        failed "$name" "$results/$name.profile.txt"
        continue
      fi
      local what="$precision matmuls"
      [[ $model == *-bf16* ]] && what="bf16 plan"
      note "   $model, $what: $(grep -o 'trained steps.*' "$results/$name.profile.txt") (timed on the GPU)"
      python3 - "$results/$name.trace.json" <<'PY' | tee -a "$summary"
import collections, json, re, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
first = next(e for e in events if e.get("name") == "step 1")
later = [e for e in events if e.get("cat") == "step" and e is not first]
steps = len(later)
events = [e for e in events if e.get("cat") in ("device", "device communication")
          and e["ts"] >= first["ts"] + first["dur"]]
# The compute stream's busy time (the union of its spans) within each
# step's device work (its first span's begin to its last span's end: the
# step's own synchronization and trace bookkeeping left out).
busy = stepped = 0.0
for step in later:
    inside = sorted((e for e in events if e["cat"] == "device" and
                     step["ts"] <= e["ts"] <= step["ts"] + step["dur"]),
                    key=lambda e: e["ts"])
    if not inside:
        continue
    stepped += max(e["ts"] + e["dur"] for e in inside) - inside[0]["ts"]
    end = None
    for e in inside:
        begin, finish = e["ts"], e["ts"] + e["dur"]
        if end is None or begin > end:
            busy += finish - begin
            end = finish
        elif finish > end:
            busy += finish - end
            end = finish
ops, count = collections.Counter(), collections.Counter()
shapes, shape_count = collections.Counter(), collections.Counter()
for e in events:
    ops[e["name"]] += e["dur"]
    count[e["name"]] += 1
    if e["name"] == "Matmul":
        detail = e.get("args", {}).get("operands", "?")
        shapes[detail] += e["dur"]
        shape_count[detail] += 1
total = sum(ops.values())
if not steps or not total or not stepped:
    print("     no device spans in the trace")
    sys.exit(0)
print(f"     {total / steps / 1e3:,.1f} ms of instructions on the GPU per step (steps 2 to {steps + 1}); "
      f"its compute stream busy {busy / stepped:.0%} of the {stepped / steps / 1e3:,.1f} ms "
      f"from each step's first kernel to its last")
for name, us in ops.most_common():
    print(f"     {name:<24} {us / steps / 1e3:9.2f} ms/step {us / total:6.1%}  ({count[name] // steps} per step)")
print("     products by shape (m x k . k x n):")
for detail, us in shapes.most_common(10):
    m = re.match(r"(\d+)x(\d+)\S* \. \d+x(\d+)\S*, batch (\d+)", detail)
    rate = ""
    if m:
        rows, depth, cols, batch = map(int, m.groups())
        rate = f", {2 * rows * depth * cols * batch * shape_count[detail] / us / 1e6:.1f} TFLOP/s"
    print(f"       {detail:<44} {us / steps / 1e3:8.2f} ms/step  ({shape_count[detail] // steps} per step{rate})")
PY
    done
  done
}

for step in $steps; do
  if ((SECONDS - start_seconds >= deadline)); then
    note "== $step: not started, past the deadline of $deadline s"
    status=1
    continue
  fi
  "step_$step"
done

if ((status == 0 && no_gpu == 0)); then
  note "== done: all passed"
  exit 0
elif ((status == 0)); then
  note "== done: no GPU here; every step that needs none passed, and every GPU step failed only for want of one"
  exit 3
fi
note "== done: something failed or did not run"
exit 1
