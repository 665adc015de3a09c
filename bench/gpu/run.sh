#!/usr/bin/env bash
# Runs this bundle's GPU tests and benchmarks in one go, on a machine with a
# GPU and its driver but possibly no MLIR, no compiler and no network (the
# plans were compiled where the bundle was made: bench/gpu/make-bundle.sh).
# Results go to $OUT when it is set, else to ./results beside this script;
# summary.txt lists every step and its outcome.
#
#   ./run.sh [--steps N]      (training steps of each benchmark, default 20)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
results=${OUT:-$here/results}
steps=20
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
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

note "== CUDA kernels against the CPU kernels"
"$here/bin/TriadCudaKernelsTests" --gtest_color=no \
  "--gtest_output=json:$results/cuda-kernels.json" > "$results/cuda-kernels.txt" 2>&1
kernels=$?
grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ tests?' "$results/cuda-kernels.txt" |
  sed 's/^/   /' | tee -a "$summary"
if [[ $kernels != 0 ]] || grep -q SKIPPED "$results/cuda-kernels.txt"; then
  note "   FAILED or skipped (exit $kernels): see cuda-kernels.txt"
  status=1
fi

# train NAME PLAN DEVICE: triad-run's metrics and log under results/.
train() {
  local name=$1 plan=$2 device=$3
  "$here/bin/triad-run" "$plan" --data "$here/data/corpus.bin" --steps "$steps" \
    --device "$device" --metrics "$results/$name.jsonl" > "$results/$name.txt" 2>&1
  local code=$?
  if [[ $code == 0 ]]; then
    note "   $name: ran $steps steps, last: $(tail -1 "$results/$name.txt")"
  else
    note "   $name: exit $code: $(tail -1 "$results/$name.txt")"
  fi
  return $code
}

note "== the equivalence law: tiny, f32, CPU against GPU (losses within 1e-4 relative)"
train tiny-cpu "$here/plans/tiny-f32.plan" cpu
if train tiny-cuda "$here/plans/tiny-f32.plan" cuda; then
  python3 - "$results/tiny-cpu.jsonl" "$results/tiny-cuda.jsonl" <<'PY' | tee -a "$summary"
import json, sys
cpu, gpu = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:3])
worst = max(abs(g - c) / max(abs(c), 1e-12) for c, g in zip(cpu, gpu))
print(f"   {len(cpu)} steps, worst relative loss difference {worst:.3g}:",
      "PASS" if len(cpu) == len(gpu) and worst < 1e-4 else "FAIL")
PY
  grep -q PASS <(tail -1 "$summary") || status=1
else
  status=1
fi

note "== benchmarks: tokens/s (median of the steps after the first 3)"
for plan in "$here"/plans/*.plan; do
  name=$(basename "$plan" .plan)
  [[ $name == tiny-f32 ]] && continue
  if train "$name-cuda" "$plan" cuda; then
    python3 - "$results/$name-cuda.jsonl" <<'PY' | tee -a "$summary"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]
if rows:
    print(f"   median {statistics.median(r['tokens_per_s'] for r in rows):,.0f} tokens/s,",
          f"{statistics.median(r['step_seconds'] for r in rows):.4f} s/step")
PY
  else
    status=1
  fi
done
for missing_plan in "$here"/plans/*.not-compiled.txt; do
  [[ -e $missing_plan ]] && note "   $(basename "$missing_plan" .not-compiled.txt): no plan ($(sed -n 2p "$missing_plan"))"
done

note "== done: $([[ $status == 0 ]] && echo all passed || echo something failed or did not run)"
exit $status
