// --triad-pad-vocab: where tp does not divide a cross entropy's
// vocabulary, the parameters that give the logits their vocabulary (and the
// embedding tables of it) grow to a multiple of tp, the ops on the way to
// the loss follow, and the loss gets its classes; anything else stays as it
// is. Its errors are at the end.
// RUN: triad-opt %s -split-input-file --triad-pad-vocab=tp=2 | FileCheck %s
// RUN: triad-opt %s -split-input-file --triad-pad-vocab=tp=4 | FileCheck %s --check-prefix=FOUR
// RUN: triad-opt %s -split-input-file --triad-pad-vocab=tp=1 | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %S/Inputs/step.mlir --triad-pad-vocab=tp=3 --triad-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-pad-vocab=tp=3 2>&1 | FileCheck %s --check-prefix=LATE
// RUN: not triad-opt %S/Inputs/step.mlir --triad-pad-vocab=tp=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: triad-opt %s -split-input-file --triad-pad-vocab="tp=1 multiple=64" | FileCheck %s --check-prefix=MULT
// RUN: triad-opt %s -split-input-file --triad-pad-vocab="tp=2 multiple=3" | FileCheck %s --check-prefix=SIX
// RUN: not triad-opt %S/Inputs/step.mlir --triad-pad-vocab=multiple=0 2>&1 | FileCheck %s --check-prefix=NOMULT

// LATE: error: the vocabulary is padded on the forward model, before --triad-autodiff declares the training state
// ZERO: error: tp=0 must be >= 1
// NOMULT: error: multiple=0 must be between 1 and 65536

// `multiple` (Megatron's make-vocab-size-divisible-by) pads a loss's
// vocabulary to a multiple of multiple x tp, on one rank too: 255 classes
// to 256 at multiple=64, to 258 at tp=2 multiple=3 (6). Tables only looked
// up still pad to a multiple of tp alone (the untied 254-row table below
// stays as it is at tp=2), and a vocabulary reached in another way stays
// whole.
// MULT-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [255, 8]
// MULT: triad.cross_entropy %{{.*}} classes 255 : tensor<4x4x256xf32>
// MULT-LABEL: triad.param @wte : tensor<254x8xf32> init
// MULT: triad.param @head : tensor<8x256xf32> unpadded [8, 254] init
// MULT: triad.param @bias : tensor<256xf32> unpadded [254] init
// MULT: triad.cross_entropy %{{.*}} classes 254 : tensor<4x4x256xf32>
// MULT-LABEL: triad.param @wte : tensor<255x8xf32> init
// MULT: triad.param @head : tensor<255x8xf32> init
// MULT-NOT: classes
// SIX-LABEL: triad.param @wte : tensor<258x8xf32> unpadded [255, 8]
// SIX: triad.matmul %{{.*}} transpose_rhs : tensor<4x4x8xf32>, tensor<258x8xf32> -> tensor<4x4x258xf32>
// SIX: triad.cross_entropy %{{.*}} classes 255 : tensor<4x4x258xf32>
// SIX-LABEL: triad.param @wte : tensor<254x8xf32> init
// SIX: triad.param @head : tensor<8x258xf32> unpadded [8, 254] init
// SIX: triad.cross_entropy %{{.*}} classes 254 : tensor<4x4x258xf32>
// SIX-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [255, 8]
// SIX: triad.param @head : tensor<255x8xf32> init

// Tied embeddings (the table read by the embedding and, transposed, by the
// output layer) with a vocabulary of 255: padded to 256 rows at tp=2 and
// tp=4; the logits follow through an elementwise op, and the loss counts
// 255 classes. tp=1 changes nothing.
// CHECK-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [255, 8] init <normal, std = 2.000000e-02>
// CHECK: triad.param @g : tensor<8xf32> init <ones>
// CHECK: triad.get_param @wte : tensor<256x8xf32>
// CHECK: triad.embedding %{{.*}} : tensor<4x4xi32>, tensor<256x8xf32> -> tensor<4x4x8xf32>
// CHECK: triad.get_param @wte : tensor<256x8xf32>
// CHECK: triad.matmul %{{.*}} transpose_rhs : tensor<4x4x8xf32>, tensor<256x8xf32> -> tensor<4x4x256xf32>
// CHECK: triad.scale %{{.*}} : tensor<4x4x256xf32>
// CHECK: triad.cross_entropy %{{.*}} classes 255 : tensor<4x4x256xf32>, tensor<4x4xi32> -> tensor<f32>
// FOUR-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [255, 8]
// FOUR: triad.cross_entropy %{{.*}} classes 255 : tensor<4x4x256xf32>
// ONE-LABEL: triad.param @wte : tensor<255x8xf32> init
// ONE-NOT: unpadded
// ONE-NOT: classes
// The gradient of a padded loss (Inputs/step.mlir, vocabulary 16, at
// tp=3) keeps its classes, and the optimizer's state takes the padded
// shape.
// GRAD: triad.param @wte : tensor<18x8xf32> unpadded [16, 8]
// GRAD: triad.state @adam.m.wte : tensor<18x8xf32> init <zeros> of @wte
// GRAD-LABEL: func.func @microbatch_step
// GRAD: triad.cross_entropy %{{.*}} classes 16 : tensor<4x4x18xf32>
// GRAD: triad.cross_entropy_grad %{{.*}} classes 16 : tensor<4x4x18xf32>, tensor<4x4xi32>
triad.param @wte : tensor<255x8xf32> init <normal, std = 0.02>
triad.param @g : tensor<8xf32> init <ones>

func.func @forward(%x: tensor<4x4xi32> {triad.input = "tokens"}, %y: tensor<4x4xi32> {triad.input = "labels"}) -> tensor<f32> {
  %h = triad.layer embedding 0 (%x) : (tensor<4x4xi32>) -> tensor<4x4x8xf32> {
  ^bb0(%ids: tensor<4x4xi32>):
    %t = triad.get_param @wte : tensor<255x8xf32>
    %e = triad.embedding %ids, %t : tensor<4x4xi32>, tensor<255x8xf32> -> tensor<4x4x8xf32>
    triad.yield %e : tensor<4x4x8xf32>
  }
  %loss = triad.layer head 0 (%h, %y) : (tensor<4x4x8xf32>, tensor<4x4xi32>) -> tensor<f32> {
  ^bb0(%a: tensor<4x4x8xf32>, %labels: tensor<4x4xi32>):
    %g = triad.get_param @g : tensor<8xf32>
    %n = triad.rms_norm %a, %g : tensor<4x4x8xf32>, tensor<8xf32>
    %t = triad.get_param @wte : tensor<255x8xf32>
    %l = triad.matmul %n, %t transpose_rhs : tensor<4x4x8xf32>, tensor<255x8xf32> -> tensor<4x4x255xf32>
    %s = triad.scale %l by 5.000000e-01 : tensor<4x4x255xf32>
    %c = triad.cross_entropy %s, %labels : tensor<4x4x255xf32>, tensor<4x4xi32> -> tensor<f32>
    triad.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Untied: the input table and an output weight [hidden, vocab] (not
// transposed) with a bias; 254 rows pad to 256 at tp=4 only.
// CHECK-LABEL: triad.param @wte : tensor<254x8xf32> init
// CHECK: triad.param @head : tensor<8x254xf32> init
// CHECK: triad.param @bias : tensor<254xf32> init
// CHECK-NOT: classes
// FOUR-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [254, 8] init
// FOUR: triad.param @head : tensor<8x256xf32> unpadded [8, 254] init
// FOUR: triad.param @bias : tensor<256xf32> unpadded [254] init
// FOUR: triad.matmul %{{.*}} : tensor<4x4x8xf32>, tensor<8x256xf32> -> tensor<4x4x256xf32>
// FOUR: triad.bias_add %{{.*}} : tensor<4x4x256xf32>, tensor<256xf32>
// FOUR: triad.cross_entropy %{{.*}} classes 254 : tensor<4x4x256xf32>
triad.param @wte : tensor<254x8xf32> init <normal, std = 0.02>
triad.param @head : tensor<8x254xf32> init <normal, std = 0.02>
triad.param @bias : tensor<254xf32> init <zeros>

func.func @forward(%x: tensor<4x4xi32> {triad.input = "tokens"}, %y: tensor<4x4xi32> {triad.input = "labels"}) -> tensor<f32> {
  %h = triad.layer embedding 0 (%x) : (tensor<4x4xi32>) -> tensor<4x4x8xf32> {
  ^bb0(%ids: tensor<4x4xi32>):
    %t = triad.get_param @wte : tensor<254x8xf32>
    %e = triad.embedding %ids, %t : tensor<4x4xi32>, tensor<254x8xf32> -> tensor<4x4x8xf32>
    triad.yield %e : tensor<4x4x8xf32>
  }
  %loss = triad.layer head 0 (%h, %y) : (tensor<4x4x8xf32>, tensor<4x4xi32>) -> tensor<f32> {
  ^bb0(%a: tensor<4x4x8xf32>, %labels: tensor<4x4xi32>):
    %w = triad.get_param @head : tensor<8x254xf32>
    %l = triad.matmul %a, %w : tensor<4x4x8xf32>, tensor<8x254xf32> -> tensor<4x4x254xf32>
    %b = triad.get_param @bias : tensor<254xf32>
    %s = triad.bias_add %l, %b : tensor<4x4x254xf32>, tensor<254xf32>
    %c = triad.cross_entropy %s, %labels : tensor<4x4x254xf32>, tensor<4x4xi32> -> tensor<f32>
    triad.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// A vocabulary reached in another way stays as it is: here the logits are
// also a result of the layer, and the output weight is read by another op
// too; the table only read by the embedding is padded on its own.
// CHECK-LABEL: triad.param @wte : tensor<256x8xf32> unpadded [255, 8]
// CHECK: triad.param @head : tensor<255x8xf32> init
// CHECK: triad.cross_entropy %{{.*}} : tensor<4x4x255xf32>, tensor<4x4xi32> -> tensor<f32>
// CHECK: triad.cross_entropy %{{.*}} : tensor<4x4x255xf32>, tensor<4x4xi32> -> tensor<f32>
triad.param @wte : tensor<255x8xf32> init <normal, std = 0.02>
triad.param @head : tensor<255x8xf32> init <normal, std = 0.02>

func.func @forward(%x: tensor<4x4xi32> {triad.input = "tokens"}, %y: tensor<4x4xi32> {triad.input = "labels"}) -> (tensor<f32>, tensor<4x4x255xf32>) {
  %h = triad.layer embedding 0 (%x) : (tensor<4x4xi32>) -> tensor<4x4x8xf32> {
  ^bb0(%ids: tensor<4x4xi32>):
    %t = triad.get_param @wte : tensor<255x8xf32>
    %e = triad.embedding %ids, %t : tensor<4x4xi32>, tensor<255x8xf32> -> tensor<4x4x8xf32>
    triad.yield %e : tensor<4x4x8xf32>
  }
  %loss, %logits = triad.layer head 0 (%h, %y) : (tensor<4x4x8xf32>, tensor<4x4xi32>) -> (tensor<f32>, tensor<4x4x255xf32>) {
  ^bb0(%a: tensor<4x4x8xf32>, %labels: tensor<4x4xi32>):
    %w = triad.get_param @head : tensor<255x8xf32>
    %l = triad.matmul %a, %w transpose_rhs : tensor<4x4x8xf32>, tensor<255x8xf32> -> tensor<4x4x255xf32>
    %c = triad.cross_entropy %l, %labels : tensor<4x4x255xf32>, tensor<4x4xi32> -> tensor<f32>
    %w2 = triad.get_param @head : tensor<255x8xf32>
    %m = triad.matmul %a, %w2 transpose_rhs : tensor<4x4x8xf32>, tensor<255x8xf32> -> tensor<4x4x255xf32>
    %d = triad.cross_entropy %m, %labels : tensor<4x4x255xf32>, tensor<4x4xi32> -> tensor<f32>
    %r = triad.add %c, %d : tensor<f32>, tensor<f32>
    triad.yield %r, %l : tensor<f32>, tensor<4x4x255xf32>
  }
  return %loss, %logits : tensor<f32>, tensor<4x4x255xf32>
}
