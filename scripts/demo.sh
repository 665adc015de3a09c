#!/usr/bin/env bash
# The main job: installs what is missing, builds Triad, turns Debian's
# fortune texts into a byte-level corpus, compiles the `tiny` GPT preset for
# a 3D mesh of eight ranks: two data-parallel replicas (ZeRO-1) of a
# two-stage pipeline (1F1B over 4 microbatches) whose stages are each split
# over two tensor-parallel ranks (dp=2 tp=2 pp=2), prints its memory report
# per rank, its communication report and the schedule with its bubble
# fraction, exports the plan and trains it on eight CPU ranks under mpirun,
# printing the loss as it falls.
#
# TRIAD_DEMO_STEPS (default 800) sets the number of steps.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRIAD_BUILD_DIR:-$root/build}"
out="$root/out"
steps="${TRIAD_DEMO_STEPS:-800}"
mesh="dp=2 tp=2 pp=2 zero=1 schedule=1f1b microbatches=4"
ranks=8

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

mkdir -p "$out"
run() {
  echo
  echo "demo: $*"
  "$@"
}

corpus=()
while IFS= read -r -d '' file; do
  corpus+=("$file")
done < <(find /usr/share/games/fortunes -maxdepth 1 -type f \
  ! -name '*.dat' ! -name '*.u8' -print0 | sort -z)
if [[ ${#corpus[@]} -eq 0 ]]; then
  echo "demo: error: no fortune texts under /usr/share/games/fortunes" \
    "(the 'fortunes' package installs them; scripts/setup.sh should have)" >&2
  exit 1
fi

echo
echo "demo: triad-data --output out/fortunes.bin /usr/share/games/fortunes/* (${#corpus[@]} texts)"
"$build/bin/triad-data" --output "$out/fortunes.bin" "${corpus[@]}"
run "$build/bin/triad-gen" --preset tiny -o "$out/tiny.mlir"
run "$build/bin/triad-opt" "$out/tiny.mlir" \
  "--triad-train-pipeline=$mesh lr=3e-3 min-lr=3e-4 warmup=20 decay-steps=$steps" \
  --triad-memory-report --triad-comm-report \
  -o "$out/tiny.rt.mlir"
run "$build/bin/triad-opt" "$out/tiny.mlir" -o /dev/null \
  "--triad-schedule-report=pp=2 microbatches=4 schedule=1f1b"
run "$build/bin/triad-translate" --export-plan "$out/tiny.rt.mlir" \
  -o "$out/tiny.plan"

# One rank per mesh position, the cores shared between them; Open MPI
# refuses root without --allow-run-as-root.
threads=$(($(nproc) / ranks))
mpi=(mpirun -np "$ranks" --oversubscribe -x "OMP_NUM_THREADS=$((threads > 0 ? threads : 1))")
if [[ $(id -u) -eq 0 ]]; then
  mpi+=(--allow-run-as-root)
fi
rm -rf "$out/checkpoints"
run "${mpi[@]}" "$build/bin/triad-run" "$out/tiny.plan" \
  --data "$out/fortunes.bin" --steps "$steps" --log-every 20 \
  --metrics "$out/metrics.jsonl" --save "$out/checkpoints" \
  --save-every 400

echo
echo "demo: metrics in out/metrics.jsonl, checkpoints in out/checkpoints;"
echo "demo: resume with: mpirun -np $ranks build/bin/triad-run out/tiny.plan --data out/fortunes.bin --load out/checkpoints --steps $((steps + 200))"
