#!/usr/bin/env bash
# Rehearses the GPU bundle where it was built, as the lent GPU machine will
# run it: builds the bundle from an existing build with the CUDA backend
# (make-bundle.sh --reuse-build), unpacks its archive in an empty folder,
# and runs its run.sh there under `env -i` (PATH=/usr/bin:/bin and HOME
# only). On a machine without a GPU every step that needs none must pass and
# every GPU step must fail only for want of a GPU (run.sh exits 3); with a
# GPU everything must pass (0). A missing library, file or tool fails the
# rehearsal either way. CI runs it (test/tools/gpu-bundle.test).
#
#   bench/gpu/rehearse.sh [--build DIR] [--compiler-bin DIR] [--work DIR]
#
#   --build DIR         a configured build with the CUDA backend (default:
#                       build of this checkout)
#   --compiler-bin DIR  triad-gen, triad-opt, triad-translate (default:
#                       DIR/bin of --build)
#   --work DIR          where the bundle, the unpacked copy and the results
#                       go (emptied first; default: a temporary folder,
#                       removed afterwards)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build
compiler_bin=
work=

die() { echo "rehearse.sh: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --compiler-bin) compiler_bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -d $build ]] || die "no build at $build"
build=$(cd "$build" && pwd)
compiler_bin=${compiler_bin:-$build/bin}
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  rm -rf "$work"
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
fi

echo "rehearsal: making the bundle"
bash "$repo/bench/gpu/make-bundle.sh" --reuse-build --build "$build" \
  --compiler-bin "$compiler_bin" --out "$work/made/gpu-bundle" \
  > "$work/make-bundle.log" 2>&1 ||
  { tail -20 "$work/make-bundle.log"; die "make-bundle.sh failed (log: $work/make-bundle.log)"; }

mkdir -p "$work/machine" "$work/home"
tar -xzf "$work/made/gpu-bundle.tar.gz" -C "$work/machine"
expected=3
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  expected=0
fi
echo "rehearsal: running the unpacked bundle under env -i (expecting exit $expected)"
set +e
env -i PATH=/usr/bin:/bin "HOME=$work/home" "OUT=$work/results" \
  TRIAD_BUNDLE_SECONDS=600 "$work/machine/gpu-bundle/run.sh" > "$work/run.log" 2>&1
code=$?
set -e
cat "$work/run.log"
problems=$(grep -E 'FAILED|MISMATCH|not found|No such file|command not found|not started' \
  "$work/results/summary.txt" || true)
if [[ $code != "$expected" || -n $problems ]]; then
  echo "rehearsal: FAILED: run.sh exited $code (expected $expected)"
  [[ -n $problems ]] && echo "$problems"
  exit 1
fi
echo "rehearsal: as expected (run.sh exited $code)"
