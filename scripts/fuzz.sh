#!/usr/bin/env bash
# Fuzzes the runtime's file loaders with libFuzzer (clang++, AddressSanitizer
# and UndefinedBehaviorSanitizer): the plan loader, checkpoint shards,
# checkpoint indexes and token corpora.
#
#   scripts/fuzz.sh [SECONDS]     each target for SECONDS (default 20)
#
# Builds the targets in build-fuzz (the runtime alone, with clang++), makes
# seed corpora from real files (a compiled tiny plan, a checkpoint it saves
# and its token corpus, with the tools of the main build when it has them),
# then runs every target for the time given, keeping what it finds in
# build-fuzz/corpus/TARGET. A crash, leak or sanitizer report fails the
# script and leaves the input that caused it in build-fuzz/crashes/; rerun
# one with build-fuzz/fuzz/TARGET FILE. A longer run is one command:
# scripts/fuzz.sh 3600.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-20}"
build="${TRIAD_FUZZ_BUILD_DIR:-$root/build-fuzz}"
main_build="${TRIAD_BUILD_DIR:-$root/build}"
jobs="${TRIAD_JOBS:-$(nproc)}"
case "$seconds" in
  ''|*[!0-9]*) echo "fuzz: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac

bash "$root/scripts/setup.sh"
sanitize="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all"
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  --no-warn-unused-cli -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTRIAD_ENABLE_COMPILER=OFF -DTRIAD_ENABLE_CUDA=OFF -DTRIAD_FUZZ=ON \
  "-DCMAKE_CXX_FLAGS=$sanitize" "-DCMAKE_C_FLAGS=$sanitize" \
  -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON \
  > "$build/configure.log" || { cat "$build/configure.log"; exit 1; }
ninja -C "$build" -j "$jobs" triad-fuzzers

# Seeds: real files, made by the main build's tools when it has them.
seeds="$build/seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{plan,safetensors,checkpoint-index,tokens}
bin="$main_build/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -x "$bin/triad-data" ]; then
  "$bin/triad-data" --output "$seeds/tokens/readme.bin" "$root/README.md" > /dev/null
fi
if [ -x "$bin/triad-gen" ] && [ -x "$bin/triad-opt" ] && [ -x "$bin/triad-translate" ]; then
  "$bin/triad-gen" --preset tiny --layers 2 --hidden 16 --heads 2 --seq 8 --batch 12 -o "$work/model.mlir"
  for mesh in "" "dp=2 tp=2 pp=2 microbatches=2" "dp=3 zero=2"; do
    name="plan${mesh// /_}"
    "$bin/triad-opt" "$work/model.mlir" "--triad-train-pipeline=$mesh" -o "$work/$name.rt.mlir"
    "$bin/triad-translate" --export-plan "$work/$name.rt.mlir" -o "$seeds/plan/${name//=/}.plan"
  done
  if [ -x "$bin/triad-run" ] && [ -f "$seeds/tokens/readme.bin" ]; then
    "$bin/triad-run" "$seeds/plan/plan.plan" --data "$seeds/tokens/readme.bin" \
      --steps 1 --save "$work/ckpt" > /dev/null
    cp "$work"/ckpt/step-*/rank-00000.safetensors "$seeds/safetensors/"
    cp "$work"/ckpt/step-*/index.json "$seeds/checkpoint-index/"
  fi
fi

status=0
mkdir -p "$build/crashes"
for target in plan safetensors checkpoint-index tokens; do
  corpus="$build/corpus/$target"
  mkdir -p "$corpus"
  echo "fuzz: triad-fuzz-$target for ${seconds} s ($(ls "$seeds/$target" | wc -l) seeds)"
  if ! ASAN_OPTIONS=detect_leaks=1 "$build/fuzz/triad-fuzz-$target" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/crashes/$target-" -print_final_stats=0 \
      "$corpus" "$seeds/$target" > "$build/$target.log" 2>&1; then
    echo "fuzz: triad-fuzz-$target FAILED (log: $build/$target.log):"
    tail -30 "$build/$target.log"
    status=1
  else
    grep -E "^(#[0-9]+ *DONE|Done [0-9]+ runs)" "$build/$target.log" | tail -1 || true
  fi
done
exit "$status"
