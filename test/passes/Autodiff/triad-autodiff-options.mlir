// Bad option values are errors.
// RUN: not triad-opt %s --triad-autodiff=recompute=sometimes 2>&1 | FileCheck %s
// CHECK: error: unknown recompute mode 'sometimes' (expected none, selective or full)
// RUN: not triad-opt %s --triad-autodiff=function=missing 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: no function @missing to differentiate
triad.param @w : tensor<4xf32> init <ones>
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @w : tensor<4xf32>
  %s = triad.sum %w dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// Optimizer options.
// RUN: not triad-opt %s --triad-autodiff=optimizer=sgd 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// OPTIMIZER: error: invalid --triad-autodiff option: unknown optimizer 'sgd' (expected adamw)
// RUN: not triad-opt %s --triad-autodiff=lr=-1 2>&1 | FileCheck %s --check-prefix=LR
// LR: error: invalid --triad-autodiff option: lr must be positive, got -1
// RUN: not triad-opt %s --triad-autodiff=lr=1e39 2>&1 | FileCheck %s --check-prefix=LRF32
// LRF32: error: invalid --triad-autodiff option: lr must be at most 3.40282e+38 (the largest f32), got 1e+39
// RUN: not triad-opt %s --triad-autodiff=clip-norm=1e300 2>&1 | FileCheck %s --check-prefix=CLIPF32
// CLIPF32: error: invalid --triad-autodiff option: clip-norm must be at most 3.40282e+38 (the largest f32), got 1e+300
// RUN: not triad-opt %s "--triad-autodiff=lr=0.001 min-lr=0.01" 2>&1 | FileCheck %s --check-prefix=MINLR
// MINLR: error: invalid --triad-autodiff option: min-lr must be in [0, lr], got 0.01
// RUN: not triad-opt %s "--triad-autodiff=warmup=100 decay-steps=10" 2>&1 | FileCheck %s --check-prefix=DECAY
// DECAY: error: invalid --triad-autodiff option: decay-steps (10) must be 0 (no decay) or end no earlier than the warmup (100)
// RUN: not triad-opt %s --triad-autodiff=beta2=1.5 2>&1 | FileCheck %s --check-prefix=BETA
// BETA: error: invalid --triad-autodiff option: beta1 and beta2 must be in [0, 1), got 0.9 and 1.5
// RUN: not triad-opt %s --triad-autodiff=epsilon=0 2>&1 | FileCheck %s --check-prefix=EPS
// EPS: error: invalid --triad-autodiff option: epsilon must be positive, got 0
// RUN: not triad-opt %s --triad-autodiff=weight-decay=-1 2>&1 | FileCheck %s --check-prefix=WD
// WD: error: invalid --triad-autodiff option: weight-decay must not be negative, got -1
// RUN: not triad-opt %s --triad-autodiff=clip-norm=-2 2>&1 | FileCheck %s --check-prefix=CLIP
// CLIP: error: invalid --triad-autodiff option: clip-norm must not be negative (0 disables clipping), got -2
// RUN: not triad-opt %s --triad-autodiff=loss-scale=0.5 2>&1 | FileCheck %s --check-prefix=SCALE
// SCALE: error: invalid --triad-autodiff option: loss-scale must be at least 1, got 0.5
// RUN: not triad-opt %s --triad-autodiff=loss-scale=1e39 2>&1 | FileCheck %s --check-prefix=SCALEF32
// SCALEF32: error: invalid --triad-autodiff option: loss-scale must be at most 3.40282e+38 (the largest f32), got 1e+39
// RUN: not triad-opt %s --triad-autodiff=loss-pieces=0 2>&1 | FileCheck %s --check-prefix=PIECES
// PIECES: error: invalid --triad-autodiff option: loss-pieces must be at least 1, got 0
// RUN: not triad-opt %s --triad-autodiff=grad-accumulation=bf16 2>&1 | FileCheck %s --check-prefix=ACCUMULATION
// ACCUMULATION: error: invalid --triad-autodiff option: grad-accumulation must be f32 or param, got 'bf16'
// RUN: not triad-opt %s --triad-autodiff=warmup=-3 2>&1 | FileCheck %s --check-prefix=NEGWARMUP
// NEGWARMUP: error: invalid --triad-autodiff option: warmup must not be negative, got -3
// RUN: not triad-opt %s --triad-autodiff=decay-steps=-2 2>&1 | FileCheck %s --check-prefix=NEGDECAY
// NEGDECAY: error: invalid --triad-autodiff option: decay-steps must be -1 (the run's length), 0 (no decay) or a step, got -2
// RUN: not triad-opt %s --triad-autodiff=lr=fast 2>&1 | FileCheck %s --check-prefix=NOTNUM
// NOTNUM: for the --lr option: 'fast' value invalid for floating point argument
