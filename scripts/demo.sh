#!/usr/bin/env bash
# The main job: installs what is missing, builds Triad, generates the `tiny`
# GPT preset, compiles (verifies) it and prints the model summary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRIAD_BUILD_DIR:-$root/build}"
out="$root/out"

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

mkdir -p "$out"
echo
echo "demo: triad-gen --preset tiny -o out/tiny.mlir"
"$build/bin/triad-gen" --preset tiny -o "$out/tiny.mlir"
"$build/bin/triad-gen" --preset tiny --print-params
echo
echo "demo: triad-opt out/tiny.mlir --triad-model-summary -o out/tiny.verified.mlir"
"$build/bin/triad-opt" "$out/tiny.mlir" --triad-model-summary -o "$out/tiny.verified.mlir"
echo
echo "demo: the model IR is in out/tiny.mlir; every preset: triad-gen --list-presets"
