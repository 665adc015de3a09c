// RUN: triad-opt %s -split-input-file --triad-autodiff | FileCheck %s
// RUN: triad-opt %s -split-input-file --triad-autodiff=recompute=full | FileCheck %s --check-prefix=FULL
// RUN: triad-opt %s -split-input-file --triad-autodiff=recompute=selective | FileCheck %s --check-prefix=SELECTIVE
// RUN: triad-opt %s -split-input-file --triad-autodiff=grad-accumulation=param | FileCheck %s --check-prefix=PARAMGRAD
// RUN: triad-opt %s -split-input-file --triad-autodiff=loss-pieces=4 | FileCheck %s --check-prefix=PIECES
// RUN: triad-opt %s -split-input-file --triad-autodiff=fold-token-mean | FileCheck %s --check-prefix=FOLD

// A two-layer model: each layer gets a backward twin; the forward layers
// return what their twins read; the tied table's gradients from both layers
// add up; results are the loss and one gradient per parameter.
triad.param @wte : tensor<16x8xf32> init <normal, std = 0.02>
triad.param @g : tensor<8xf32> init <ones>

// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @microbatch_step
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xi32>, %[[Y:.*]]: tensor<2x4xi32>)
// CHECK-SAME: -> (tensor<f32> {triad.output = "loss"}, tensor<16x8xf32> {triad.grad = @wte}, tensor<8xf32> {triad.grad = @g})
// CHECK: %[[H:.*]] = triad.layer embedding 0 (%[[X]]) : (tensor<2x4xi32>) -> tensor<2x4x8xf32>
// CHECK: %[[HEAD:.*]]:3 = triad.layer head 0 (%[[H]], %[[Y]]) : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>)
// CHECK: triad.yield %{{.*}}, %[[NORMED:.*]], %[[LOGITS:.*]] : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>
// CHECK: %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DHEAD:.*]]:3 = triad.layer head 0 backward (%[[H]], %[[Y]], %[[ONE]], %[[HEAD]]#1, %[[HEAD]]#2)
// CHECK-SAME: -> (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<8xf32>)
// CHECK: triad.cross_entropy_grad
// CHECK: triad.matmul
// CHECK: triad.rms_norm_grad
// CHECK: %[[DEMB:.*]] = triad.layer embedding 0 backward (%[[X]], %[[DHEAD]]#0) : (tensor<2x4xi32>, tensor<2x4x8xf32>) -> tensor<16x8xf32>
// CHECK: triad.embedding_grad
// CHECK: %[[DWTE:.*]] = triad.add %[[DHEAD]]#1, %[[DEMB]] : tensor<16x8xf32>, tensor<16x8xf32>
// CHECK: return %[[HEAD]]#0, %[[DWTE]], %[[DHEAD]]#2

// Full recomputation: the forward layers return nothing extra; the backward
// layer repeats the forward ops before the gradient ops.
// FULL-LABEL: func.func @microbatch_step
// FULL: triad.layer head 0 (%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
// FULL: triad.layer head 0 backward (%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<2x4xi32>, tensor<f32>)
// FULL: triad.rms_norm %
// FULL: triad.matmul
// FULL: triad.cross_entropy_grad

// SELECTIVE-LABEL: func.func @microbatch_step
// SELECTIVE: triad.layer head 0 (%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>)
func.func @forward(%x: tensor<2x4xi32>, %y: tensor<2x4xi32>) -> tensor<f32> {
  %h = triad.layer embedding 0 (%x) : (tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  ^bb0(%ids: tensor<2x4xi32>):
    %t = triad.get_param @wte : tensor<16x8xf32>
    %e = triad.embedding %ids, %t : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
    triad.yield %e : tensor<2x4x8xf32>
  }
  %loss = triad.layer head 0 (%h, %y) : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32> {
  ^bb0(%a: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>):
    %g = triad.get_param @g : tensor<8xf32>
    %n = triad.rms_norm %a, %g : tensor<2x4x8xf32>, tensor<8xf32>
    %t = triad.get_param @wte : tensor<16x8xf32>
    %l = triad.matmul %n, %t transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %c = triad.cross_entropy %l, %labels : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
    triad.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Selective recomputation keeps everything but the attention core: the
// backward layer recomputes the attention from the saved q (= k = v here);
// without recomputation the forward layer also returns the attention output.
triad.param @wq : tensor<8x8xf32> init <normal, std = 0.02>

// SELECTIVE-LABEL: func.func @microbatch_step
// SELECTIVE: triad.layer transformer 0 (%{{.*}}) : (tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
// SELECTIVE: triad.layer transformer 0 backward
// SELECTIVE: triad.attention
// SELECTIVE: triad.attention_grad
// CHECK-LABEL: func.func @microbatch_step
// CHECK: triad.layer transformer 0 (%{{.*}}) : (tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
// CHECK: triad.layer transformer 0 backward
// CHECK-NOT: triad.attention %
// CHECK: triad.attention_grad
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %h = triad.layer transformer 0 (%x) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    %w = triad.get_param @wq : tensor<8x8xf32>
    %q = triad.matmul %a, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
    %o = triad.attention %q, %q, %q heads = 2 kv_heads = 2 mask = causal : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %p = triad.mul %o, %o : tensor<2x4x8xf32>
    triad.yield %p : tensor<2x4x8xf32>
  }
  %s = triad.sum %h dims = [0, 1, 2] : tensor<2x4x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// The apply step: AdamW over every parameter, its moments declared as state
// of the parameter; rank-1 parameters are not decayed.
triad.param @w : tensor<4x4xf32> init <normal, std = 0.02>
triad.param @b : tensor<4xf32> init <zeros>

// CHECK-LABEL: triad.state @adam.m.w : tensor<4x4xf32> init <zeros> of @w
// CHECK-NEXT: triad.state @adam.v.w : tensor<4x4xf32> init <zeros> of @w
// CHECK-NEXT: triad.state @adam.m.b : tensor<4xf32> init <zeros> of @b
// CHECK-NEXT: triad.state @adam.v.b : tensor<4xf32> init <zeros> of @b
// CHECK-LABEL: func.func @apply_step(%arg0: tensor<4x4xf32> {triad.grad = @w}
// CHECK-SAME: %[[GB:.*]]: tensor<4xf32> {triad.grad = @b})
// CHECK-SAME: -> (tensor<f32> {triad.output = "grad_norm"}, tensor<f32> {triad.output = "lr"}, tensor<f32> {triad.output = "skipped"})
// CHECK: %[[OLD:.*]] = triad.get_param @optimizer.step
// CHECK: %[[STEP:.*]] = triad.add %[[OLD]]
// CHECK: %[[LR:.*]] = triad.lr_schedule %[[STEP]] peak = 3.000000e-04 floor = 0.000000e+00 warmup = 0 decay = -1
// CHECK: %[[SW:.*]] = triad.sum_squares %arg0
// CHECK: %[[SB:.*]] = triad.sum_squares %[[GB]]
// CHECK: %[[TOTAL:.*]] = triad.add %[[SW]], %[[SB]]
// CHECK: %[[COEF:.*]], %[[NORM:.*]] = triad.clip_coefficient %[[TOTAL]] max_norm = 1.000000e+00
// CHECK: triad.assign @optimizer.step, %[[STEP]]
// CHECK: triad.adamw_update %{{.*}}, %arg0, %{{.*}}, %{{.*}}, %[[LR]], %[[STEP]], %[[COEF]] beta1 = 9.000000e-01 beta2 = {{.*}} epsilon = 1.000000e-08 weight_decay = 1.000000e-01
// CHECK: triad.assign @w
// CHECK: triad.assign @adam.m.w
// CHECK: triad.assign @adam.v.w
// CHECK: triad.adamw_update %{{.*}}, %[[GB]], {{.*}} weight_decay = 0.000000e+00
// CHECK: return %[[NORM]], %[[LR]], %{{.*}} : tensor<f32>, tensor<f32>, tensor<f32>

// With fold-token-mean the gradients come as token sums, with the step's
// 1 / tokens last: the sum of squares is scaled by its square before the
// clipping, the coefficient AdamW applies by it after; nothing else reads
// it.
// FOLD-LABEL: func.func @apply_step(%arg0: tensor<4x4xf32> {triad.grad = @w}
// FOLD-SAME: %{{.*}}: tensor<4xf32> {triad.grad = @b}, %[[MEAN:.*]]: tensor<f32> {triad.mean_scale})
// FOLD: triad.sum_squares %arg1
// FOLD-NEXT: %[[TOTAL:.*]] = triad.add
// FOLD: %[[SQUARE:.*]] = triad.mul %[[MEAN]], %[[MEAN]] : tensor<f32>
// FOLD-NEXT: %[[SCALED:.*]] = triad.mul %[[TOTAL]], %[[SQUARE]] : tensor<f32>
// FOLD-NEXT: %[[COEF:.*]], %[[NORM:.*]] = triad.clip_coefficient %[[SCALED]]
// FOLD-NEXT: %[[FOLDED:.*]] = triad.mul %[[COEF]], %[[MEAN]] : tensor<f32>
// FOLD: triad.adamw_update %{{.*}}, %arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FOLDED]]
// FOLD: triad.adamw_update {{.*}}, %[[FOLDED]]
// FOLD: return %[[NORM]],
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @w : tensor<4x4xf32>
  %b = triad.get_param @b : tensor<4xf32>
  %y = triad.bias_add %w, %b : tensor<4x4xf32>, tensor<4xf32>
  %s = triad.sum %y dims = [0, 1] : tensor<4x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Mixed precision: f16 parameters get f32 master copies (starting from the
// parameter's own init), the backward pass starts from the dynamic loss
// scale, its 16-bit gradients leave the microbatch step widened to f32 (to
// be summed over microbatches and ranks in f32), and the apply step
// unscales, skips overflowed steps (a gradient element above f16's range
// overflows the step too) and writes the parameter back as a rounded copy
// of its master.
triad.param @h : tensor<4x4xf16> init <normal, std = 0.02>

// CHECK-LABEL: triad.state @loss_scale : tensor<f32> init <constant, value = 6.553600e+04>
// CHECK-NEXT: triad.state @loss_scale.good_steps : tensor<f32> init <zeros>
// CHECK: triad.state @master.h : tensor<4x4xf32> init <normal, std = 2.000000e-02> of @h
// CHECK-LABEL: func.func @microbatch_step
// CHECK: %[[SEED:.*]] = triad.get_param @loss_scale : tensor<f32>
// CHECK: %[[GRAD:.*]] = triad.cast %{{.*}} : tensor<4x4xf16> -> tensor<4x4xf32>
// CHECK: return %{{.*}}, %[[GRAD]] : tensor<f32>, tensor<4x4xf32>
// CHECK-LABEL: func.func @apply_step(%arg0: tensor<4x4xf32> {triad.grad = @h})
// CHECK-SAME: (tensor<f32> {triad.output = "grad_norm"}, tensor<f32> {triad.output = "lr"}, tensor<f32> {triad.output = "skipped"}, tensor<f32> {triad.output = "loss_scale"})
// CHECK: %[[TOTAL:.*]] = triad.sum_squares %arg0 limit = 6.550400e+04 : tensor<4x4xf32>
// CHECK: %[[SKIP:.*]], %[[SCALE:.*]], %[[GOOD:.*]], %[[INV:.*]] = triad.loss_scale_update %[[TOTAL]], %{{.*}}, %{{.*}} growth_interval = 1000 growth = 2.000000e+00 backoff = 5.000000e-01
// CHECK: triad.assign @loss_scale, %[[SCALE]]
// CHECK: %[[MASTER:.*]] = triad.get_param @master.h : tensor<4x4xf32>
// CHECK: %[[NEW:.*]], %{{.*}}, %{{.*}} = triad.adamw_update %[[MASTER]], %arg0
// CHECK: %[[KEPT:.*]] = triad.select %[[SKIP]], %[[MASTER]], %[[NEW]] : tensor<4x4xf32>
// CHECK: triad.assign @master.h, %[[KEPT]]
// CHECK: %[[OLD:.*]] = triad.get_param @h : tensor<4x4xf16>
// CHECK: %[[NARROW:.*]] = triad.cast %[[NEW]] : tensor<4x4xf32> -> tensor<4x4xf16>
// CHECK: %[[PARAM:.*]] = triad.select %[[SKIP]], %[[OLD]], %[[NARROW]] : tensor<4x4xf16>
// CHECK: triad.assign @h, %[[PARAM]] : tensor<4x4xf16>
// CHECK: return %{{.*}}, %{{.*}}, %[[SKIP]]
// With grad-accumulation=param the gradient stays f16 (summed and rounded
// in f16), and the apply step's norm and AdamW read it as it is (no f32
// copy of it).
// PARAMGRAD-LABEL: func.func @microbatch_step
// PARAMGRAD: return %{{.*}}, %{{.*}} : tensor<f32>, tensor<4x4xf16>
// PARAMGRAD-LABEL: func.func @apply_step(%arg0: tensor<4x4xf16> {triad.grad = @h})
// PARAMGRAD-NOT: triad.cast %arg0
// PARAMGRAD: triad.sum_squares %arg0 limit = 6.550400e+04 : tensor<4x4xf16>
// PARAMGRAD: triad.adamw_update %{{.*}}, %arg0
// With the step's loss the mean of 4 microbatch losses, each backward
// starts from a quarter of the loss scale and the apply step unscales by
// 4 / scale; models without loss scaling (the f32 ones above) still start
// from 1.
// PIECES: triad.state @loss_scale :
// PIECES: func.func @microbatch_step
// PIECES: %[[SCALE:.*]] = triad.get_param @loss_scale : tensor<f32>
// PIECES-NEXT: %[[SEED:.*]] = triad.scale %[[SCALE]] by 2.500000e-01 : tensor<f32>
// PIECES: func.func @apply_step
// PIECES: %{{.*}}, %{{.*}}, %{{.*}}, %[[INV:.*]] = triad.loss_scale_update
// PIECES: %[[COUNT:.*]] = arith.constant dense<4.000000e+00> : tensor<f32>
// PIECES-NEXT: %[[UNSCALE:.*]] = triad.mul %[[INV]], %[[COUNT]] : tensor<f32>
// PIECES: triad.mul %{{.*}}, %[[UNSCALE]]
// Under loss scaling fold-token-mean changes nothing: the overflow check
// reads each mean gradient.
// FOLD-LABEL: func.func @apply_step(%arg0: tensor<4x4xf32> {triad.grad = @h})
// FOLD-NOT: triad.mean_scale
// FOLD: triad.loss_scale_update
func.func @forward() -> tensor<f32> {
  %h = triad.get_param @h : tensor<4x4xf16>
  %w = triad.cast %h : tensor<4x4xf16> -> tensor<4x4xf32>
  %s = triad.sum %w dims = [0, 1] : tensor<4x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
