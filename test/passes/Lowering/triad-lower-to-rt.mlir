// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff=clip-norm=0 --triad-lower-to-rt | FileCheck %s --check-prefix=MODEL
// RUN: triad-opt %s -split-input-file --triad-lower-to-rt | FileCheck %s
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff=fold-token-mean --triad-lower-to-rt | FileCheck %s --check-prefix=FOLD
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 4 --dtype bf16 | triad-opt --triad-train-pipeline=fuse-optimizer=false | FileCheck %s --check-prefix=BF16
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 16 --batch 4 --dtype f16 | triad-opt '--triad-train-pipeline=pp=2 microbatches=2 fuse-grad-accumulation=false' | FileCheck %s --check-prefix=F16PP
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff=clip-norm=0 '--triad-zero=zero=1 dp=2' --triad-shard-propagate=dp=2 --triad-partition --triad-lower-to-rt=dp=2 | FileCheck %s --check-prefix=BUCKET
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff=clip-norm=0 '--triad-zero=zero=1 dp=2' --triad-shard-propagate=dp=2 --triad-partition '--triad-lower-to-rt=dp=2 bucket-bytes=256' | FileCheck %s --check-prefix=SMALL

// ZeRO-1 at dp=2 (Inputs/two-params.mlir): the gradients entering the apply
// step reduce-scatter in one bucket (an input, an output and a dimension
// per tensor), and the updated pieces all-gather in one bucket straight
// into the parameters (the all_gather of the first sank past the second's
// update; no copy is left).
// BUCKET: rt.persistent "wte" parameter %[[WTE:[0-9a-z]+]]
// BUCKET: rt.persistent "g" parameter %[[G:[0-9a-z]+]]
// BUCKET: rt.persistent "grad.wte" accumulator %[[GWTE:[0-9a-z]+]]
// BUCKET: rt.persistent "grad.g" accumulator %[[GG:[0-9a-z]+]]
// BUCKET-LABEL: rt.func @apply_step
// BUCKET: rt.kernel reduce_scatter(%[[GWTE]], %[[GG]]) -> (%{{.*}}, %{{.*}}) ints [0, 0, 0] {reason = "2 tensors in one bucket, the first: {{.*}}"} : (memref<16x8xf32>, memref<8xf32>) -> (memref<8x8xf32>, memref<4xf32>)
// BUCKET-NOT: reduce_scatter
// BUCKET: rt.kernel adamw
// BUCKET: rt.kernel adamw
// BUCKET-NEXT: rt.kernel all_gather(%{{.*}}, %{{.*}}) -> (%[[WTE]], %[[G]]) ints [0, 0, 0] {reason = "2 tensors in one bucket, the first: {{.*}}"} : (memref<8x8xf32>, memref<4xf32>) -> (memref<16x8xf32>, memref<8xf32>)
// BUCKET-NOT: all_gather
// BUCKET-NOT: rt.kernel copy({{.*}}) -> (%[[WTE]])
// BUCKET: rt.step
// Buckets of at most 256 bytes: the 512 bytes of wte's gradient go alone,
// and so does everything after them.
// SMALL-LABEL: rt.func @apply_step
// SMALL: rt.kernel reduce_scatter(%{{[0-9]+}}) -> (%{{[0-9]+}}) ints [0, 0] {reason = "#dist.layout
// SMALL: rt.kernel reduce_scatter(%{{[0-9]+}}) -> (%{{[0-9]+}}) ints [0, 0] {reason = "#dist.layout
// SMALL: rt.kernel all_gather(%{{[0-9]+}}) -> (%{{[0-9]+}}) ints [0, 0] {reason = "#dist.layout
// SMALL: rt.kernel all_gather(%{{[0-9]+}}) -> (%{{[0-9]+}}) ints [0, 0] {reason = "#dist.layout

// An f16 pipeline: each pipeline rank's sum of squares is summed over the
// stages once, and both the overflow check and the clipping (after
// unscaling by 2 / scale: the step's loss is the mean of 2 microbatches')
// read that sum.
// A gradient summed in f32 is accumulated (widened as it is read) right
// after the kernel that completes its 16-bit value, not at the end of the
// stage's backward, where every 16-bit gradient of the stage would still be
// live.
// F16PP-LABEL: rt.program @rank0
// F16PP-LABEL: rt.func @backward_s0
// F16PP: rt.kernel matmul({{.*}}) -> ([[DW:%[0-9]+]]) ints [1, 0] : (memref<32x256xf16>, memref<32x32xf16>) -> memref<256x32xf16>
// F16PP-NEXT: rt.kernel accumulate([[ACC:%[0-9]+]], [[DW]], %{{.*}}) -> ([[ACC]]) : (memref<256x32xf32>, memref<256x32xf16>, memref<f32>) -> memref<256x32xf32>
// F16PP-NEXT: rt.kernel activation_grad
// F16PP-LABEL: rt.program @rank1
// F16PP-LABEL: rt.func @apply_step
// F16PP: rt.kernel all_reduce(%{{.*}}) -> ([[TOTAL:%[0-9]+]]) ints [{{[0-9]+}}] {reason = "the gradient norm's sum of squares over the parameters of every pipeline stage"}
// F16PP-NEXT: rt.kernel loss_scale_update([[TOTAL]], %{{.*}}, %{{.*}}) -> (%{{.*}}, %{{.*}}, %{{.*}}, [[INVERSE:%[0-9]+]])
// F16PP-NOT: every pipeline stage
// F16PP: rt.kernel fill() -> ([[PIECES:%[0-9]+]]) floats [2.000000e+00]
// F16PP-NEXT: rt.kernel mul([[INVERSE]], [[PIECES]]) -> ([[UNSCALE:%[0-9]+]])
// F16PP-NEXT: rt.kernel mul([[UNSCALE]], [[UNSCALE]]) -> ([[SQUARE:%[0-9]+]])
// F16PP-NEXT: rt.kernel mul([[TOTAL]], [[SQUARE]]) -> ([[UNSCALED:%[0-9]+]])
// F16PP-NEXT: rt.kernel clip_coefficient([[UNSCALED]])

// A bf16 model: bf16 parameters and activations; an f32 master copy of each
// parameter, drawn from the parameter's own generator stream so that the
// two start equal; gradients widened to f32 as they are accumulated over
// microbatches (the accumulate reads the bf16 gradient: no cast, no f32
// copy); the step's products (each with its bf16 bias fused) and norms on
// bf16 buffers.
// An apply step that folds the token mean (--triad-autodiff=fold-token-mean)
// reads the accumulators as they are: the step's 1 / tokens is its last
// argument, which scales the sum of squares and the coefficient; only the
// loss is divided.
// FOLD-LABEL: rt.func @apply_step
// FOLD-NEXT: rt.kernel reciprocal(%[[TOKENS:[^)]*]]) -> (%[[MEAN:[^)]*]])
// FOLD-NEXT: rt.kernel scale_by(%{{.*}}, %[[MEAN]]) -> (%{{.*}}) : (memref<f32>, memref<f32>) -> memref<f32>
// FOLD-NOT: rt.kernel scale_by
// FOLD: rt.kernel mul(%[[MEAN]], %[[MEAN]]) -> (%[[SQUARE:[^)]*]])
// FOLD-NEXT: rt.kernel mul(%{{.*}}, %[[SQUARE]]) -> (%[[TOTAL:[^)]*]])
// FOLD-NEXT: rt.kernel clip_coefficient(%[[TOTAL]]) -> (%[[COEF:[^,]*]], %{{.*}})
// FOLD-NEXT: rt.kernel mul(%[[COEF]], %[[MEAN]]) -> (%[[FOLDED:[^)]*]])
// FOLD: rt.kernel adamw({{.*}}, %[[FOLDED]]) ->
// FOLD: rt.kernel adamw({{.*}}, %[[FOLDED]]) ->
// FOLD-NOT: rt.kernel scale_by
// FOLD: rt.func @eval_step

// (The optimizer step as lowered, without --triad-fuse-optimizer, which
// triad-fuse-optimizer.mlir checks on the same model.)
// BF16: rt.persistent "embed.wte" parameter %{{.*}} global [256, 32] offsets [0, 0] init <normal, std = 2.000000e-02> : memref<256x32xbf16>
// BF16: rt.persistent "master.embed.wte" state %{{.*}} init <normal, std = 2.000000e-02> stream "embed.wte" : memref<256x32xf32>
// BF16: rt.persistent "master.layers.0.attn_norm.weight" state %{{.*}} init <ones> : memref<32xf32>
// BF16: rt.persistent "grad.embed.wte" accumulator %{{.*}} init <zeros> : memref<256x32xf32>
// BF16-LABEL: rt.func @microbatch_step
// BF16: rt.kernel embedding({{.*}}) -> ({{.*}}) : (memref<4x16xi32>, memref<256x32xbf16>) -> memref<4x16x32xbf16>
// BF16: rt.kernel matmul({{.*}}) ints [0, 0, 1] : (memref<4x16x32xbf16>, memref<32x32xbf16>, memref<32xbf16>) -> memref<4x16x32xbf16>
// BF16-NOT: rt.kernel cast
// BF16: rt.kernel accumulate([[ACC:%.*]], %{{.*}}, %{{.*}}) -> ([[ACC]]) : (memref<256x32xf32>, memref<256x32xbf16>, memref<f32>) -> memref<256x32xf32>
// BF16-NOT: rt.kernel cast
// BF16-LABEL: rt.func @apply_step
// BF16: rt.kernel adamw({{.*}} : (memref<256x32xf32>, memref<256x32xf32>, memref<256x32xf32>, memref<256x32xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<256x32xf32>, memref<256x32xf32>, memref<256x32xf32>)
// BF16: rt.kernel cast({{.*}}) -> ({{.*}}) : (memref<256x32xf32>) -> memref<256x32xbf16>


// The two-parameter model of Inputs/two-params.mlir after autodiff:
// parameters, AdamW state and accumulators become persistent buffers; the microbatch step counts its labels, weighs each
// gradient into its accumulator right after the kernel that completes it;
// the apply step divides by the token count and updates parameters and
// their moments in place.

// MODEL: rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
// MODEL-LABEL: rt.program @rank0 pipeline_rank 0 arena
// MODEL-DAG: rt.persistent "wte" parameter %[[WTE:[0-9a-z]+]] global [16, 8] offsets [0, 0] init <normal, std = 2.000000e-02>
// MODEL-DAG: rt.persistent "g" parameter %[[G:[0-9a-z]+]] global [8] offsets [0] init <ones>
// MODEL-DAG: rt.persistent "optimizer.step" state %[[STEP:[0-9a-z]+]] global [] offsets [] init <zeros>
// MODEL-DAG: rt.persistent "adam.m.wte" state %[[MW:[0-9a-z]+]] global [16, 8]
// MODEL-DAG: rt.persistent "adam.v.wte" state %[[VW:[0-9a-z]+]] global [16, 8]
// MODEL-DAG: rt.persistent "grad.wte" accumulator %[[GW:[0-9a-z]+]] global [16, 8] offsets [0, 0] init <zeros>
// MODEL-DAG: rt.persistent "grad.g" accumulator %[[GG:[0-9a-z]+]] global [8]
// MODEL-DAG: rt.persistent "loss.sum" accumulator %[[LOSS:[0-9a-z]+]] global []
// MODEL-DAG: rt.persistent "loss.tokens" accumulator %[[COUNT:[0-9a-z]+]] global []

// MODEL-LABEL: rt.func @begin_step args() kinds [] results() names []
// MODEL-NEXT: rt.kernel fill() -> (%[[GW]]) floats [0.000000e+00]
// MODEL-NEXT: rt.kernel fill() -> (%[[GG]]) floats [0.000000e+00]
// MODEL-NEXT: rt.kernel fill() -> (%[[LOSS]]) floats [0.000000e+00]
// MODEL-NEXT: rt.kernel fill() -> (%[[COUNT]]) floats [0.000000e+00]

// The kernels of each layer are named by spans of the body (the embedding
// is kernel 2, the head's forward 3 to 5, ...), for traces.
// MODEL-LABEL: rt.func @microbatch_step
// MODEL-SAME: args(%[[X:[0-9a-z]+]], %[[Y:[0-9a-z]+]] : memref<2x4xi32>, memref<2x4xi32>) kinds ["tokens", "labels"] results() names []
// MODEL-SAME: layers ["embedding 0", "head 0", "head 0 backward", "embedding 0 backward"] at [2, 3, 3, 6, 7, 12, 12, 13] {
// MODEL-NEXT: rt.kernel count_valid(%[[Y]]) -> (%[[N:[0-9a-z]+]]) ints [-100]
// MODEL-NEXT: rt.kernel fill() -> (%[[ONE:[0-9a-z]+]]) floats [1.000000e+00]
// MODEL-NEXT: rt.kernel embedding(%[[X]], %[[WTE]]) -> (%[[H:[0-9a-z]+]]) :
// MODEL-NEXT: rt.kernel rms_norm(%[[H]], %[[G]]) -> (%[[NORMED:[0-9a-z]+]]) floats [1.000000e-05]
// MODEL-NEXT: rt.kernel matmul(%[[NORMED]], %[[WTE]]) -> (%[[LOGITS:[0-9a-z]+]]) ints [0, 1]
// MODEL-NEXT: rt.kernel cross_entropy(%[[LOGITS]], %[[Y]]) -> (%[[L:[0-9a-z]+]]) ints [-100]
// MODEL: rt.kernel rms_norm_grad(%[[H]], %[[G]], %{{.*}}) -> (%[[DH:[0-9a-z]+]], %[[DG:[0-9a-z]+]])
// MODEL-NEXT: rt.kernel accumulate(%[[GG]], %[[DG]], %[[N]]) -> (%[[GG]])
// MODEL-NEXT: rt.kernel embedding_grad(%[[X]], %[[DH]])
// MODEL-NEXT: rt.kernel add(%{{.*}}, %{{.*}}) -> (%[[DWTE:[0-9a-z]+]]) :
// MODEL-NEXT: rt.kernel accumulate(%[[GW]], %[[DWTE]], %[[N]]) -> (%[[GW]])
// MODEL-NEXT: rt.kernel accumulate(%[[LOSS]], %[[L]], %[[N]]) -> (%[[LOSS]])
// MODEL-NEXT: rt.kernel accumulate(%[[COUNT]], %[[N]], %[[ONE]]) -> (%[[COUNT]])
// MODEL-NEXT: }

// MODEL-LABEL: rt.func @apply_step
// MODEL-SAME: args() kinds [] results(%[[MEAN:[0-9a-z]+]], %[[COUNT]], %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) names ["loss", "tokens", "grad_norm", "lr", "skipped"]
// MODEL-NEXT: rt.kernel reciprocal(%[[COUNT]]) -> (%[[INV:[0-9a-z]+]]) :
// MODEL-NEXT: rt.kernel scale_by(%[[GW]], %[[INV]]) -> (%[[GW]])
// MODEL-NEXT: rt.kernel scale_by(%[[GG]], %[[INV]]) -> (%[[GG]])
// MODEL-NEXT: rt.kernel scale_by(%[[LOSS]], %[[INV]]) -> (%[[MEAN]])
// MODEL: rt.kernel add(%[[STEP]], %{{.*}}) -> (%[[NEXT:[0-9a-z]+]]) :
// MODEL: rt.kernel copy(%[[NEXT]]) -> (%[[STEP]])
// MODEL: rt.kernel adamw(%[[WTE]], %[[GW]], %[[MW]], %[[VW]], %{{.*}}, %[[NEXT]], %{{.*}}) -> (%[[WTE]], %[[MW]], %[[VW]])
// MODEL: rt.kernel adamw(%[[G]], %[[GG]], %{{.*}}) -> (%[[G]], %{{.*}}, %{{.*}})
// MODEL: rt.step [@begin_step, @microbatch_step, @apply_step] microbatches [0, 0, 0]

// Memory reuse: a chain of activations needs two buffers' bytes, not one
// per value; a reshape is a view at its input's offset; an update with no
// later reader of the old value is written in place.
triad.param @w : tensor<16xf32> init <zeros>

// CHECK-LABEL: rt.program @rank0
// CHECK: %[[W:[0-9a-z]+]] = rt.buffer 0 : memref<16xf32>
// CHECK: %[[A:[0-9a-z]+]] = rt.buffer [[A_OFF:[0-9]+]] : memref<2x8x16xf32>
// CHECK-NEXT: %[[B:[0-9a-z]+]] = rt.buffer [[B_OFF:[0-9]+]] : memref<2x8x16xf32>
// CHECK-NEXT: %[[C:[0-9a-z]+]] = rt.buffer [[A_OFF]] : memref<2x8x16xf32>
// CHECK-NEXT: %[[D:[0-9a-z]+]] = rt.buffer [[A_OFF]] : memref<2x8x16xf32>
// CHECK: rt.persistent "w" parameter %[[W]] global [16]
// CHECK: rt.persistent "grad.w" accumulator %[[GW:[0-9a-z]+]]
// CHECK: rt.kernel broadcast(%[[W]]) -> (%[[A]])
// CHECK-NEXT: rt.kernel activation(%[[A]]) -> (%[[B]]) ints [3]
// CHECK-NEXT: rt.kernel activation(%[[B]]) -> (%[[C]]) ints [4]
// CHECK-NEXT: rt.kernel cross_entropy(%[[D]], %{{.*}}) -> (%{{.*}}) ints [-100]
// CHECK-LABEL: rt.func @apply_step
// CHECK: rt.kernel sum_squares(%[[W]])
// CHECK-NEXT: rt.kernel scale(%[[GW]]) -> (%[[W]]) floats [-1.000000e+00]
// CHECK-NEXT: }
func.func @microbatch_step(%x: tensor<2x8xi32> {triad.input = "tokens"}, %y: tensor<2x8xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<16xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<16xf32>
  %a = triad.broadcast %w : tensor<16xf32> -> tensor<2x8x16xf32>
  %b = triad.relu %a : tensor<2x8x16xf32>
  %c = triad.silu %b : tensor<2x8x16xf32>
  %v = triad.reshape %c : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %d = triad.reshape %v : tensor<16x16xf32> -> tensor<2x8x16xf32>
  %loss = triad.cross_entropy %d, %y : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
  %zero = arith.constant dense<0.0> : tensor<16xf32>
  return %loss, %zero : tensor<f32>, tensor<16xf32>
}
func.func @apply_step(%g: tensor<16xf32> {triad.grad = @w}) -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<16xf32>
  %n = triad.sum_squares %w : tensor<16xf32>
  %new = triad.scale %g by -1.0 : tensor<16xf32>
  triad.assign @w, %new : tensor<16xf32>
  return %n : tensor<f32>
}

// -----

// An update that cannot be in place (the old value is read after it) is a
// copy at the assign, and the earlier read keeps a copy of the old value.
triad.param @w : tensor<4xf32> init <zeros>

// CHECK-LABEL: rt.func @apply_step
// CHECK: rt.kernel copy(%[[W:[0-9a-z]+]]) -> (%[[OLD:[0-9a-z]+]])
// CHECK-NEXT: rt.kernel scale(%[[OLD]]) -> (%[[NEW:[0-9a-z]+]]) floats [2.000000e+00]
// CHECK-NEXT: rt.kernel copy(%[[NEW]]) -> (%[[W]])
// CHECK-NEXT: rt.kernel sum_squares(%[[OLD]])
func.func @microbatch_step(%x: tensor<1x4xi32> {triad.input = "tokens"}, %y: tensor<1x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<4xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<4xf32>
  %l = triad.broadcast %w : tensor<4xf32> -> tensor<1x4x4xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x4x4xf32>, tensor<1x4xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<4xf32>
}
func.func @apply_step(%g: tensor<4xf32> {triad.grad = @w}) -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<4xf32>
  %n = triad.scale %w by 2.0 : tensor<4xf32>
  triad.assign @w, %n : tensor<4xf32>
  %s = triad.sum_squares %w : tensor<4xf32>
  return %s : tensor<f32>
}

// -----

// A splat constant fills its tensor; any other f32 constant (ALiBi's
// slopes) lists its values.
triad.param @w : tensor<2xf32> init <zeros>

// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel values() -> (%{{.*}}) floats [1.000000e+00, 2.500000e-01]
// CHECK: rt.kernel fill() -> (%{{.*}}) floats [3.000000e+00]
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %c = arith.constant dense<[1.0, 0.25]> : tensor<2xf32>
  %s = arith.constant dense<3.0> : tensor<2xf32>
  %m = triad.mul %w, %c : tensor<2xf32>
  %a = triad.add %m, %s : tensor<2xf32>, tensor<2xf32>
  %l = triad.broadcast %a : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}
