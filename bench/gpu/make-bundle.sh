#!/usr/bin/env bash
# Builds triad-run and the GPU tests with CUDA, compiles the plans with the
# MLIR tools of this machine, and packs everything a GPU machine with no MLIR
# and no network needs into one folder and a .tar.gz of it. On the GPU
# machine, unpack it and run ./run.sh (see bench/README.md).
#
#   bench/gpu/make-bundle.sh [--compiler-bin DIR] [--build DIR] [--out DIR]
#                            [--arch ARCHS] [--jobs N] [--with-cuda-libs]
#                            [--reuse-build]
#
#   --compiler-bin DIR  triad-gen, triad-opt, triad-translate (default:
#                       $TRIAD_COMPILER_BIN, else build/bin of this checkout)
#   --build DIR         the CUDA build of the runtime (default: build-gpu)
#   --out DIR           the bundle (default: out/gpu-bundle; the archive is
#                       DIR.tar.gz)
#   --arch ARCHS        CMAKE_CUDA_ARCHITECTURES (default: 90, H100/H200)
#   --jobs N            build jobs (default: 1)
#   --with-cuda-libs    also copy cuBLASLt, cuBLAS and NCCL (about 800 MB);
#                       by default run.sh finds them on the GPU machine (the
#                       CUDA toolkit, or PyTorch's nvidia-* wheels)
#   --reuse-build       take the binaries of --build as they are built (a
#                       full build with CUDA, such as build/: bench/gpu/
#                       rehearse.sh) instead of configuring and building a
#                       runtime-only CUDA build there
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
compiler_bin=${TRIAD_COMPILER_BIN:-$repo/build/bin}
build=$repo/build-gpu
out=$repo/out/gpu-bundle
arch=90
jobs=1
with_cuda_libs=0
reuse_build=0

die() { echo "make-bundle.sh: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --compiler-bin) compiler_bin=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --with-cuda-libs) with_cuda_libs=1; shift ;;
    --reuse-build) reuse_build=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for tool in triad-gen triad-opt triad-translate; do
  [[ -x $compiler_bin/$tool ]] ||
    die "$compiler_bin/$tool is missing: build the compiler (ninja -C build) or pass --compiler-bin DIR"
done

tests="TriadCudaKernelsTests TriadCudaAttentionTests TriadCudnnAttentionTests TriadCudaExecutorTests"
build=$(mkdir -p "$build" && cd "$build" && pwd)
if [[ $reuse_build == 1 ]]; then
  # Nothing is built: the caller may be a ninja running in that build (the
  # lit suite's rehearsal).
  echo "== reusing the CUDA runtime of $build as it is built"
  for binary in bin/triad-run bin/triad-data bin/TriadAttentionBench bin/TriadKernelBench \
                $(for test in $tests; do echo "test/Unit/runtime/$test"; done); do
    [[ -x $build/$binary ]] ||
      die "$build/$binary is missing: --reuse-build needs a build with the CUDA backend, built"
  done
else
  echo "== building the runtime with CUDA (sm_$arch) in $build"
  mkdir -p "$build"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTRIAD_ENABLE_COMPILER=OFF -DTRIAD_ENABLE_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" > "$build/configure.log" 2>&1 ||
    { tail -20 "$build/configure.log"; die "configuring failed (log: $build/configure.log)"; }
  ninja -C "$build" -j "$jobs" triad-run triad-data TriadAttentionBench \
    TriadKernelBench $tests
fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/plans" "$out/data"
cp "$build/bin/triad-run" "$build/bin/triad-data" \
  "$build/bin/TriadAttentionBench" "$build/bin/TriadKernelBench" "$out/bin/"
for test in $tests; do
  cp "$build/test/Unit/runtime/$test" "$out/bin/"
done
cp "$repo/test/e2e/compare-losses.py" "$repo/bench/gpt_torch.py" \
  "$repo/bench/gpu/torch_peer.py" "$repo/bench/gpu/attention_peer.py" \
  "$repo/bench/gpu/kernel_peer.py" "$repo/bench/gpu/cuda_timing.py" \
  "$repo/bench/gpu/gtest_outcome.py" "$out/"

echo "== compiling plans with $compiler_bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# plan NAME PIPELINE-OPTIONS TRIAD-GEN-ARGS...: a plan, or a note of why not.
plan() {
  local name=$1 options=$2
  shift 2
  if "$compiler_bin/triad-gen" "$@" -o "$work/$name.mlir" 2> "$work/$name.err" &&
     "$compiler_bin/triad-opt" "$work/$name.mlir" \
       "--triad-train-pipeline=$options" -o "$work/$name.rt.mlir" 2>> "$work/$name.err" &&
     "$compiler_bin/triad-translate" --export-plan "$work/$name.rt.mlir" \
       -o "$out/plans/$name.plan" 2>> "$work/$name.err"; then
    echo "  $name: $(stat -c %s "$out/plans/$name.plan") bytes"
  else
    echo "  $name: not compiled: $(head -1 "$work/$name.err")"
    { echo "triad-gen $* | triad-opt --triad-train-pipeline=$options"
      cat "$work/$name.err"; } > "$out/plans/$name.not-compiled.txt"
  fi
}
# The equivalence law's models (f32: the CPU and the GPU must agree, and 8
# ranks on one GPU must agree with one): a GPT with dropout, a LLaMA-style
# one (RoPE, RMS norm, SwiGLU, grouped-query heads), a BLOOM-style one
# (ALiBi, an embedding norm), and a GPT with dropout on one rank and on
# dp2 x tp2 x pp2.
law="--preset tiny --layers 2 --seq 16 --batch 8"
# law-gpt holds its learning rate after the warmup (decay-steps=0): its
# checkpoint of a 5-step run is resumed to step 10 and compared with a
# 10-step run, and the default schedule decays over each run.
plan law-gpt "decay-steps=0" $law --hidden 32 --heads 2 --dropout 0.1
plan law-llama "" $law --hidden 64 --heads 4 --kv-heads 2 --positions rope \
  --norm rmsnorm --activation swiglu
plan law-bloom "" $law --hidden 32 --heads 4 --positions alibi --embedding-norm
# The GPT with its 256 classes padded to 288 (vocab-multiple): the padding
# columns take no part in the loss on either backend.
plan law-gpt-padded "vocab-multiple=96" $law --hidden 32 --heads 2 --dropout 0.1
plan law-plain "microbatches=2" $law --hidden 32 --heads 2 --dropout 0.1
plan law-mesh "dp=2 tp=2 pp=2 microbatches=2" $law --hidden 32 --heads 2 \
  --dropout 0.1
# The GPT in bf16 (the GPU's bf16 kernels against the CPU's).
plan law-gpt-bf16 "" $law --hidden 32 --heads 2 --dropout 0.1 --dtype bf16
# The GPT in f16 with dynamic loss scaling: from a scale of 1024 no step
# overflows; from 2^24 the CPU skips steps 1-7 and 9 (test/e2e/
# mixed-precision.test), and the GPU must skip the same ones (the norm's
# limit, inf and NaN checks, the scale's halving).
plan law-gpt-f16 "loss-scale=1024 decay-steps=0" $law --hidden 32 --heads 2 \
  --dropout 0.1 --dtype f16
plan law-gpt-f16-skips "loss-scale=16777216 decay-steps=0" $law --hidden 32 \
  --heads 2 --dropout 0.1 --dtype f16
plan tiny-f32 "lr=3e-4" --preset tiny
# GPT-2-medium class and 1.3B class (hidden 2048), f32 and bf16.
plan gpt2-medium-f32 "lr=3e-4" --preset gpt2-medium --seq 1024 --batch 8
plan gpt2-medium-bf16 "lr=3e-4 dtype=bf16" --preset gpt2-medium --seq 1024 \
  --batch 8 --dtype bf16
plan 1.3b-f32 "lr=3e-4" --preset gpt2-medium --layers 24 --hidden 2048 \
  --heads 16 --ffn 8192 --seq 2048 --batch 4
plan 1.3b-bf16 "lr=3e-4 dtype=bf16" --preset gpt2-medium --layers 24 \
  --hidden 2048 --heads 16 --ffn 8192 --seq 2048 --batch 4 --dtype bf16
# The same bf16 models with the output layer padded to a multiple of 128
# columns (vocab-multiple: 50,304 for GPT-2's 50,257; the first GPU profile
# ran the unpadded LM head's products at 108-146 TFLOP/s against 660-790
# for the layers'), and the 1.3 B one without the fused epilogues (its
# DGELU_BGRAD product ran at 282 TFLOP/s): the throughput step runs them
# where TRIAD_BUNDLE_MODELS names them.
plan gpt2-medium-bf16-v128 "lr=3e-4 dtype=bf16 vocab-multiple=128" \
  --preset gpt2-medium --seq 1024 --batch 8 --dtype bf16
plan 1.3b-bf16-v128 "lr=3e-4 dtype=bf16 vocab-multiple=128" --preset gpt2-medium \
  --layers 24 --hidden 2048 --heads 16 --ffn 8192 --seq 2048 --batch 4 --dtype bf16
plan 1.3b-bf16-unfused "lr=3e-4 dtype=bf16 fuse-epilogues=false" --preset gpt2-medium \
  --layers 24 --hidden 2048 --heads 16 --ffn 8192 --seq 2048 --batch 4 --dtype bf16

echo "== corpus (byte tokens of the repository's text)"
"$build/bin/triad-data" --output "$out/data/corpus.bin" \
  "$repo/README.md" "$repo/bench/README.md" $(find "$repo/dialects" -name '*.md' | sort)

echo "== shared libraries"
# Everything the binaries load except the C library family and the driver
# (libcuda comes with the GPU machine's driver); cuBLASLt, cuBLAS and NCCL
# only with --with-cuda-libs.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libcuda\.)'
[[ $with_cuda_libs == 1 ]] || skip="$skip|^(libcublas|libcublasLt|libnccl)"
for binary in "$out"/bin/*; do
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ $name =~ $skip ]]; then
    echo "$name" >> "$out/lib/NOT-BUNDLED"
  elif [[ $name =~ ^(libstdc\+\+|libgcc_s)\. ]]; then
    # The GPU machine's own C++ runtime is usually newer, and the CUDA
    # libraries there may need it: run.sh uses these only when it is older.
    mkdir -p "$out/lib/fallback"
    cp -L "$path" "$out/lib/fallback/$name"
  else
    cp -L "$path" "$out/lib/$name"
  fi
done
sort -u -o "$out/lib/NOT-BUNDLED" "$out/lib/NOT-BUNDLED" 2>/dev/null || true

echo "== Open MPI (for the 8-rank step where the GPU machine has no mpirun)"
# Debian's Open MPI and PMIx under one prefix that mirrors /usr, with every
# library their programs and plugins load (but the C library family) in
# deps/; run.sh points OPAL_PREFIX and PMIx at it.
ompi=$out/openmpi
multiarch=lib/x86_64-linux-gnu
if [[ -x /usr/bin/orterun && -d /usr/$multiarch/openmpi/lib ]]; then
  mkdir -p "$ompi/bin" "$ompi/$multiarch" "$ompi/share" "$ompi/deps"
  cp -L /usr/bin/orterun /usr/bin/orted "$ompi/bin/"
  ln -s orterun "$ompi/bin/mpirun"
  cp -a /usr/$multiarch/openmpi "$ompi/$multiarch/"
  cp -a /usr/$multiarch/pmix2 "$ompi/$multiarch/"
  cp -a /usr/share/openmpi "$ompi/share/"
  # Java bindings and headers are not needed to run.
  rm -rf "$ompi/$multiarch/openmpi/include" "$ompi/$multiarch/pmix2/include" \
    "$ompi"/$multiarch/openmpi/lib/*.a "$ompi"/$multiarch/openmpi/lib/mpi.jar \
    "$ompi"/$multiarch/openmpi/lib/libmpi_java* "$ompi"/$multiarch/openmpi/lib/openmpi3/*java*
  { ldd "$ompi"/bin/orterun "$ompi"/bin/orted
    find "$ompi/$multiarch" -name '*.so*' -type f -exec ldd {} \; ; } 2> /dev/null |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u | while read -r name path; do
      [[ $name =~ $skip || $path == */openmpi/lib/* || $path == */pmix2/lib/* ||
         $name =~ ^(libstdc\+\+|libgcc_s)\. || -e $ompi/deps/$name ]] && continue
      cp -L "$path" "$ompi/deps/$name"
    done
  echo "  $(du -sh "$ompi" | cut -f1)"
else
  echo "  not carried: no Debian Open MPI on this machine (/usr/bin/orterun)"
fi

cp "$repo/bench/gpu/run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
{
  echo "commit: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "cuda architectures: $arch"
  nvcc=$(grep -m1 '^CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)
  echo "nvcc: $("$nvcc" --version | grep -o 'release [0-9.]*')"
  echo "cuda libraries bundled: $([[ $with_cuda_libs == 1 ]] && echo yes || echo no)"
} > "$out/MANIFEST"
(cd "$out" && find . -type f | sort | xargs sha256sum) >> "$out/MANIFEST"

tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
echo "== bundle: $out ($(du -sh "$out" | cut -f1)), archive $out.tar.gz ($(du -sh "$out.tar.gz" | cut -f1))"
