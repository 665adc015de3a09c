// RUN: triad-opt %S/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 microbatches=1' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=DP
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-train-pipeline=microbatches=2 --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=SINGLE
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-comm-report 2>&1 | FileCheck %s --check-prefix=NOPLAN

// Data parallel: one step reduces the loss sum and token count (two
// adjacent floats, 68 bytes with the alignment gap) and one bucket with both
// gradients (16x8 + 8 floats and the gap: 544 bytes), once per step.
// DP: triad comm report: program @rank0 (pipeline rank 0), one optimizer step
// DP-NEXT: function calls collective group ranks bytes why
// DP-NEXT: apply_step 1 all_reduce dp 2 68 the step's loss sum and token count, partial over dp
// DP-NEXT: apply_step 1 all_reduce dp 2 544 gradients entering @apply_step, partial over dp: 2 tensors in one bucket
// DP-NEXT: total over dp 612 B per step
// DP-NEXT: collectives per step: 2

// One rank, two microbatches: nothing to communicate.
// SINGLE: (no collectives: every rank computes alone)
// SINGLE-NEXT: collectives per step: 0

// NOPLAN: error: holds no rt.plan and rt.program to report on; run --triad-lower-to-rt or --triad-train-pipeline first
