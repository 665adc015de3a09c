// RUN: triad-opt %S/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 microbatches=1' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=DP
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-train-pipeline=microbatches=2 --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=SINGLE
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-comm-report 2>&1 | FileCheck %s --check-prefix=NOPLAN
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 4 --seq 16 --batch 8 | triad-opt '--triad-train-pipeline=dp=4 zero=2' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=WIRE
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 4 --seq 16 --batch 8 | triad-opt '--triad-train-pipeline=dp=2 tp=2' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=STEPONLY

// Only what one step calls: evaluation's forward pass (eval_step), which
// has the tensor-parallel all-reduces of the forward too, is not in it.
// STEPONLY: function calls collective
// STEPONLY-NOT: eval_step
// STEPONLY: microbatch_step 1 all_reduce tp
// STEPONLY-NOT: eval_step
// STEPONLY: collectives per step

// Data parallel: one step reduces one bucket with both gradients (16x8 + 8
// floats and the alignment gap: 544 bytes) and the loss sum and token count
// (two adjacent floats, 68 bytes with the gap), once per step; with one
// microbatch, in the microbatch step, as soon as each is complete.
// DP: triad comm report: program @rank0 (pipeline rank 0), one optimizer step
// DP-NEXT: function calls collective group ranks bytes why
// DP-NEXT: microbatch_step 1 all_reduce dp 2 544 gradients of @microbatch_step, partial over dp: 2 tensors in one bucket, reduced as soon as its bucket is complete (overlap-grad-reduce)
// DP-NEXT: microbatch_step 1 all_reduce dp 2 68 the step's loss sum and token count, partial over dp, reduced as soon as its bucket is complete (overlap-grad-reduce)
// Over 2 ranks a ring all_reduce sends the whole tensor from each rank
// (half in its reduce-scatter, half in its all-gather).
// DP-NEXT: total over dp 612 B per step, 612 B sent by each rank (ring algorithms)
// DP-NEXT: collectives per step: 2

// One rank, two microbatches: nothing to communicate.
// SINGLE: (no collectives: every rank computes alone)
// SINGLE-NEXT: collectives per step: 0

// NOPLAN: error: holds no rt.plan and rt.program to report on; run --triad-lower-to-rt or --triad-train-pipeline first

// Over 4 ranks each rank sends 3/4 of what a reduce_scatter or all_gather
// moves and 3/2 of an all_reduce's tensor: ZeRO-2 reduce-scatters the
// 125,312 gradient bytes and all-gathers as many parameter bytes, and
// all-reduces 72 bytes (the loss sum and token count, the sum of squares):
// 3/4 x 250,624 + 3/2 x 72 = 188,076.
// WIRE: total over dp 250,696 B per step, 188,076 B sent by each rank (ring algorithms)
