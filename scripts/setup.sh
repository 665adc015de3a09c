#!/usr/bin/env bash
# Installs every Debian package Triad needs to build and test, when missing.
# Idempotent: packages already present are left alone; apt-get update runs at
# most once, and only when something has to be installed.
set -euo pipefail

PACKAGES=(
  # Toolchain.
  build-essential cmake ninja-build git python3
  # MLIR/LLVM 22: libraries, mlir-tblgen, lit and FileCheck.
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  # Unit tests.
  libgtest-dev libgmock-dev
  # Runtime: Status/StatusOr and command-line flags; JSON (checkpoint
  # headers and indexes).
  libabsl-dev nlohmann-json3-dev
  # CPU kernels: BLAS for the matrix products (the OpenMP build shares the
  # kernels' threads; see runtime/CMakeLists.txt).
  libopenblas-dev libopenblas0-openmp
  # bf16 products on the CPU's bf16 units (OpenBLAS has none).
  libdnnl-dev
  # The plan file format.
  libflatbuffers-dev flatbuffers-compiler
  # Multi-rank runs on CPUs: mpirun and the MPI library triad-run links.
  openmpi-bin libopenmpi-dev
  # Fuzzing the runtime's loaders (scripts/fuzz.sh): clang with libFuzzer
  # and the sanitizers' runtimes, and its OpenMP for the CPU kernels.
  clang libclang-rt-14-dev libomp-14-dev
  # Tests: text to turn into token corpora (fortune files), and PyTorch as
  # a reference (/usr/bin/python3 imports it; the pyenv python3 does not).
  fortunes python3-torch
  # scripts/plot-metrics.py draws the metrics (and its test runs it).
  python3-matplotlib
  # Tokenizers: SentencePiece for triad-data (the library) and for the tests
  # (its Python module trains small models).
  libsentencepiece-dev python3-sentencepiece
  # Launch under Slurm: test/e2e/slurm.test starts a one-node cluster of
  # this machine (test/e2e/slurm-cluster.py) and runs a job with srun.
  slurmctld slurmd slurm-client munge
  # The virtual environment for the Python test helpers from PyPI (below).
  python3-venv
)

# Python tools and test helpers that Debian does not package, from PyPI,
# in the project's own virtual environment (.venv, or TRIAD_VENV):
# TensorBoard, whose reader checks triad-run's event files, and Hugging
# Face's tokenizers, which triad-data --tokenizer encodes with.
venv() {
  local root dir
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dir=${TRIAD_VENV:-$root/.venv}
  if [ ! -x "$dir/bin/python" ]; then
    echo "setup: creating the Python environment $dir"
    /usr/bin/python3 -m venv "$dir"
  fi
  if ! "$dir/bin/python" -c "import tensorboard, tokenizers" 2>/dev/null; then
    echo "setup: installing tensorboard and tokenizers into $dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
      "tensorboard==2.21.0" "tokenizers==0.22.1"
  fi
  # Hugging Face's transformers, which triad-convert's tests check against,
  # in an environment of its own (.venv-transformers, or
  # TRIAD_TRANSFORMERS_VENV) that sees Debian's PyTorch (python3-torch):
  # 4.31 (the first release with LLaMA's grouped-query attention) runs on
  # Debian's PyTorch 1.13, and wants an older tokenizers than .venv's.
  dir=${TRIAD_TRANSFORMERS_VENV:-$root/.venv-transformers}
  if [ ! -x "$dir/bin/python" ]; then
    echo "setup: creating the Python environment $dir"
    /usr/bin/python3 -m venv --system-site-packages "$dir"
  fi
  if ! "$dir/bin/python" -c "import transformers, torch" 2>/dev/null; then
    echo "setup: installing transformers into $dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
      "transformers==4.31.0"
  fi
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  venv
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

echo "setup: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
venv
echo "setup: done"
