// RUN: triad-opt %s --triad-zero='zero=1 dp=2' | FileCheck %s
// RUN: triad-opt %s --triad-zero='zero=0 dp=2' | FileCheck %s --check-prefix=OFF
// RUN: not triad-opt %s --triad-zero='zero=2 dp=2' 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not triad-opt %s --triad-zero='zero=4 dp=2' 2>&1 | FileCheck %s --check-prefix=FOUR
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=0' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM0
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=1' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM1
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=1' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM
// RUN: triad-gen --preset tiny --layers 1 | triad-opt --triad-autodiff '--triad-zero=zero=1 dp=2 tp=2' '--triad-shard-propagate=dp=2 tp=2' | FileCheck %s --check-prefix=TP

// ZeRO-1 marks the optimizer state of each parameter to be split over dp
// (shard-propagate picks the dimension); state of nothing (the step
// counter), scalars and a layout given by hand stay as they are.
// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
// CHECK: triad.state @m.w : tensor<4x8xf32> init <zeros> of @w {dist.zero}
// CHECK: triad.state @m.odd : tensor<3xf32> init <zeros> of @odd {dist.zero}
// CHECK: triad.state @step : tensor<f32> init <zeros>{{$}}
// CHECK: triad.state @m.b : tensor<8xf32> init <zeros> of @b {dist.layout = #dist.layout<{}>}
// OFF-NOT: dist.zero
// TWO: error: zero=2 is not supported yet (sharded gradients and parameters); use zero=0 or zero=1
// FOUR: error: zero=4 is not a ZeRO stage (0, 1, 2 or 3)
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
triad.param @w : tensor<4x8xf32> init <zeros>
triad.param @odd : tensor<3xf32> init <zeros>
triad.param @b : tensor<8xf32> init <zeros>
triad.state @m.w : tensor<4x8xf32> init <zeros> of @w
triad.state @m.odd : tensor<3xf32> init <zeros> of @odd
triad.state @step : tensor<f32> init <zeros>
triad.state @m.b : tensor<8xf32> init <zeros> of @b {dist.layout = #dist.layout<{}>}

// The memory report's closed form at dp=4: ZeRO-1 keeps a quarter of the
// AdamW moments (2 x 482,304 B) on each rank, plus the 4-byte step counter.
// MEM0: optimizer state 964,612 B
// MEM1: parameters 482,304 B
// MEM1-NEXT: optimizer state 241,156 B
// MEM1-NEXT: gradient accumulators 482,312 B

// Each rank updates its slice of every parameter, then the updated slices
// are all-gathered (the slicing itself moves nothing and is not listed).
// COMM: apply_step 1 all_reduce dp 4 482,304 gradients entering @apply_step, partial over dp: 36 tensors in one bucket
// COMM: apply_step 1 all_gather dp 4 65,536 #dist.layout<{dp}, {}> to #dist.layout<{}, {}> for triad.assign to embed.wte
// COMM-NOT: all_slice
// COMM: collectives per step: 38

// With tensor parallelism the state takes its parameter's split and dp goes
// on the first dimension that can take it: after tp on a column-split bias,
// alone on the rows of a column-split weight.
// TP-DAG: triad.param @layers.0.mlp.fc1.weight : tensor<64x256xf32> init <normal, std = 2.000000e-02> {dist.layout = #dist.layout<{}, {tp}>}
// TP-DAG: triad.state @adam.m.layers.0.mlp.fc1.weight : tensor<64x256xf32> init <zeros> of @layers.0.mlp.fc1.weight {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// TP-DAG: triad.state @adam.m.layers.0.mlp.fc1.bias : tensor<256xf32> init <zeros> of @layers.0.mlp.fc1.bias {dist.layout = #dist.layout<{tp, dp}>, dist.zero}
