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

# The plans travel in the bundle for the executor that will run them on the
# GPU (the CUDA executor is not written yet): no training or benchmark runs
# here today.
note "== plans in the bundle (not run: no CUDA executor yet)"
for plan in "$here"/plans/*.plan; do
  [[ -e $plan ]] && note "   $(basename "$plan" .plan)"
done
for missing_plan in "$here"/plans/*.not-compiled.txt; do
  [[ -e $missing_plan ]] && note "   $(basename "$missing_plan" .not-compiled.txt): no plan ($(sed -n 2p "$missing_plan"))"
done

note "== done: $([[ $status == 0 ]] && echo all passed || echo something failed or did not run)"
exit $status
