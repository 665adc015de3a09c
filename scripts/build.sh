#!/usr/bin/env bash
# Configures and builds Triad with CMake and Ninja into build/ (or $TRIAD_BUILD_DIR).
# Extra arguments go to CMake, e.g. -DTRIAD_ENABLE_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRIAD_BUILD_DIR:-$root/build}"
jobs="${TRIAD_JOBS:-$(nproc)}"

echo "build: configuring $build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
echo "build: building with $jobs jobs"
ninja -C "$build" -j "$jobs"
