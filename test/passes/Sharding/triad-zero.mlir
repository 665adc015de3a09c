// RUN: triad-opt %s --triad-zero='zero=1 dp=2' | FileCheck %s
// RUN: triad-opt %s --triad-zero='zero=0 dp=2' | FileCheck %s --check-prefix=OFF
// RUN: triad-opt %s --triad-zero='zero=3 dp=2' | FileCheck %s --check-prefix=THREE
// RUN: not triad-opt %s --triad-zero='zero=4 dp=2' 2>&1 | FileCheck %s --check-prefix=FOUR
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=0' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM0
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=1' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM1
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=2' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM2
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=3' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM3
// RUN: triad-gen --preset tiny --batch 6 | triad-opt '--triad-train-pipeline=dp=3 zero=1' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=PADDED

// dp=3 divides no dimension of the tiny model: every state tensor still
// takes its third, in padded pieces (964,608 B of Adam state at dp=1 is
// 321,536 B a third; the pieces hold 326,432 B, the step counter 4).
// PADDED: parameters                                      482,304 B
// PADDED-NEXT: optimizer state                                 326,436 B {{.*}} 73 tensors
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=1' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=2' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM2
// RUN: triad-gen --preset tiny | triad-opt '--triad-train-pipeline=dp=4 zero=3' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM3
// RUN: triad-gen --preset tiny --layers 1 | triad-opt --triad-autodiff '--triad-zero=zero=2 dp=2' | FileCheck %s --check-prefix=GRADS
// RUN: triad-gen --preset tiny --layers 1 | triad-opt '--triad-train-pipeline=dp=2 tp=2 zero=1' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=TPCOMM
// RUN: triad-gen --preset tiny --layers 1 | triad-opt --triad-autodiff '--triad-zero=zero=3 dp=2' '--triad-shard-propagate=dp=2' --triad-partition | FileCheck %s --check-prefix=GATHER
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
// Stage 3 marks the parameters too, except one with a layout given by hand
// (one that dp divides nowhere is marked, and stays whole).
// THREE: triad.param @w : tensor<4x8xf32> init <zeros> {dist.zero}
// THREE: triad.param @odd : tensor<3xf32> init <zeros> {dist.zero}
// THREE: triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{}>}{{$}}
// THREE: triad.state @m.w : tensor<4x8xf32> init <zeros> of @w {dist.zero}
// FOUR: error: zero=4 is not a ZeRO stage (0, 1, 2 or 3)
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
triad.param @w : tensor<4x8xf32> init <zeros>
triad.param @odd : tensor<3xf32> init <zeros>
triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{}>}
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
// ZeRO-2 also keeps a quarter of the gradients (plus the loss sum and
// token count, 8 B); ZeRO-3 a quarter of the parameters as well.
// MEM2: parameters 482,304 B
// MEM2-NEXT: optimizer state 241,156 B
// MEM2-NEXT: gradient accumulators 120,584 B
// MEM3: parameters 120,576 B
// MEM3-NEXT: optimizer state 241,156 B
// MEM3-NEXT: gradient accumulators 120,584 B

// Each gradient is reduce-scattered straight into its optimizer state's
// pieces as the apply step starts (no all-reduce of gradients, no local
// slice), each rank updates its pieces, the gradient norm sums them (one
// scalar all-reduce), and the updated pieces are all-gathered: each rank
// sends 3/4 of the parameter bytes twice (482,304 B each way) where an
// all-reduce and the all-gather sent them three times. The 36 tensors go
// in one bucket each way: 4 collectives per step, not 74.
// COMM-NOT: gradients entering
// COMM: microbatch_step 1 all_reduce dp 4 68 the step's loss sum and token count, partial over dp, reduced as soon as its bucket is complete (overlap-grad-reduce)
// COMM-NEXT: apply_step 1 reduce_scatter dp 4 482,304 36 tensors in one bucket, the first: #dist.layout<{}, {}, partial = {dp}> to #dist.layout<{dp}, {}> for the ZeRO piece of @embed.wte entering @apply_step
// COMM-NOT: gradients entering
// COMM-NOT: all_slice
// COMM: apply_step 1 all_reduce dp 4 4 #dist.layout<partial = {dp}> to #dist.layout<> for triad.clip_coefficient
// COMM-NEXT: apply_step 1 all_gather dp 4 482,304 36 tensors in one bucket, the first: #dist.layout<{dp}, {}> to #dist.layout<{}, {}> for triad.assign to embed.wte
// COMM-NOT: all_slice
// COMM: total over dp 964,680 B per step, 723,564 B sent by each rank (ring algorithms)
// COMM: collectives per step: 4

// With tensor parallelism the state takes its parameter's split and dp goes
// on the first dimension that can take it: after tp on a column-split bias,
// alone on the rows of a column-split weight.
// TP-DAG: triad.param @layers.0.mlp.fc1.weight : tensor<64x256xf32> init <normal, std = 2.000000e-02> {dist.layout = #dist.layout<{}, {tp}>}
// TP-DAG: triad.state @adam.m.layers.0.mlp.fc1.weight : tensor<64x256xf32> init <zeros> of @layers.0.mlp.fc1.weight {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// TP-DAG: triad.state @adam.m.layers.0.mlp.fc1.bias : tensor<256xf32> init <zeros> of @layers.0.mlp.fc1.bias {dist.layout = #dist.layout<{tp, dp}>, dist.zero}

// ZeRO-2: each gradient is reduce-scattered over dp in the microbatch step
// to the split of its optimizer state, in buckets (each reduce-scatter
// sinks past the backward after it to the next, its accumulate after the
// bucket): the tiny model's 36 in one; the apply step reduces no gradient,
// only the partial sum of squares for clipping (the loss and the token
// count go as soon as they are complete).
// COMM2: microbatch_step 1 reduce_scatter dp 4 482,304 36 tensors in one bucket, the first: #dist.layout<{}, partial = {dp}> to #dist.layout<{dp}> for result 36 of @microbatch_step
// COMM2-NOT: gradients entering @apply_step
// COMM2: microbatch_step 1 all_reduce dp 4 68 the step's loss sum and token count, partial over dp, reduced as soon as its bucket is complete (overlap-grad-reduce)
// COMM2: apply_step 1 all_reduce dp 4 4 #dist.layout<partial = {dp}> to #dist.layout<> for triad.clip_coefficient
// COMM2: apply_step 1 all_gather dp 4 482,304 36 tensors in one bucket, the first: #dist.layout<{dp}, {}> to #dist.layout<{}, {}> for triad.assign to embed.wte
// COMM2: collectives per step: 4

// ZeRO-3: parameters are gathered before each read in the microbatch step
// (the forward's and again the backward's) and never after the update; in
// the backward, where nothing reads a layer's parameters before all are
// gathered, its 8 go in one bucket.
// COMM3: microbatch_step 1 all_gather dp 4 65,536 #dist.layout<{dp}, {}> to #dist.layout<{}, {}> for triad.get_param @embed.wte
// COMM3: microbatch_step 1 reduce_scatter dp 4
// COMM3: microbatch_step 1 all_gather dp 4 197,120 8 tensors in one bucket, the first: #dist.layout<{dp}> to #dist.layout<{}> for triad.get_param @layers.1.attn_norm.weight
// COMM3-NOT: for triad.assign
// COMM3: collectives per step: 40

// Stage 2 marks the gradients the microbatch step returns.
// GRADS-LABEL: func.func @microbatch_step
// GRADS-SAME: tensor<256x64xf32> {dist.zero, triad.grad = @embed.wte}
// GRADS-SAME: tensor<64xf32> {dist.zero, triad.grad = @head.norm.bias}

// Stage 3 after partitioning: a rank reads its stored half of a parameter
// and gathers it whole for the microbatch step; the apply step updates the
// stored half in place, with the state's and the gradient's halves.
// GATHER: triad.param @embed.wte : tensor<256x64xf32> init <normal, std = 2.000000e-02> {dist.layout = #dist.layout<{dp}, {}>, dist.zero}
// GATHER-LABEL: func.func @microbatch_step
// GATHER: %[[HALF:.*]] = triad.get_param @embed.wte {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<128x64xf32>
// GATHER: %[[WHOLE:.*]] = dist.all_gather %[[HALF]] dim 0 over ["dp"] {{.*}} : tensor<128x64xf32> -> tensor<256x64xf32>
// GATHER: triad.embedding %{{.*}}, %[[WHOLE]]
// GATHER: dist.reduce_scatter %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<256x64xf32> -> tensor<128x64xf32>
// GATHER-LABEL: func.func @apply_step
// GATHER-SAME: %[[GRAD:[a-z0-9]+]]: tensor<128x64xf32> {dist.layout = #dist.layout<{dp}, {}>, triad.grad = @embed.wte}
// GATHER-NOT: dist.all_gather
// GATHER: %[[W:.*]] = triad.get_param @embed.wte {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<128x64xf32>
// GATHER: triad.adamw_update %[[W]], %[[GRAD]], {{.*}} : tensor<128x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>
// GATHER-NOT: dist.all_gather
// GATHER: triad.assign @embed.wte

// With tp, a state split {tp, dp} on the dimension its parameter splits
// {tp} is updated in its pieces: the parameter is sliced, no state is
// gathered for the update. The norms' gradients, pending over tp and dp,
// are all-reduced over tp in buckets, then reduce-scattered over dp like
// every other gradient (all 20 in one bucket, and their updated pieces
// gathered in one); the gradient norm reduces the pieces' sums. The six
// tensors the tp all-reduce sums lie side by side in the arena (placed
// first, in the order the all-reduces run), so they go in one collective
// of 1,536 bytes, not three of 512, in the microbatch step as soon as the
// last of them is complete (one microbatch: overlap-grad-reduce).
// TPCOMM-NOT: for triad.adamw_update
// TPCOMM: microbatch_step 1 all_reduce tp 2 1,536 gradients of @microbatch_step, partial over tp: 6 tensors in one bucket, reduced as soon as its bucket is complete (overlap-grad-reduce)
// TPCOMM-NOT: partial over tp:
// TPCOMM-NOT: partial over dp:
// TPCOMM: apply_step 1 reduce_scatter dp 2 150,400 20 tensors in one bucket, the first: #dist.layout<{tp}, {}, partial = {dp}> to #dist.layout<{tp, dp}, {}> for the ZeRO piece of @embed.wte entering @apply_step
// TPCOMM: apply_step 1 all_reduce tp 2 4 #dist.layout<partial = {tp, dp}> to #dist.layout<partial = {dp}> for triad.add
// TPCOMM: apply_step 1 all_reduce dp 2 4 #dist.layout<partial = {dp}> to #dist.layout<> for triad.clip_coefficient
// TPCOMM: apply_step 1 all_gather dp 2 150,400 20 tensors in one bucket, the first: #dist.layout<{tp, dp}, {}> to #dist.layout<{tp}, {}> for triad.assign to embed.wte
// TPCOMM-NOT: for triad.adamw_update
// TPCOMM: total over dp 300,872 B per step, 150,472 B sent by each rank (ring algorithms)
// TPCOMM: collectives per step: 15
