// RUN: triad-opt %s -split-input-file --triad-lower-to-rt | FileCheck %s
// RUN: triad-opt %s -split-input-file '--triad-lower-to-rt=fuse-epilogues=false' | FileCheck %s --check-prefix=OFF
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 4 --activation gelu_tanh | triad-opt --triad-train-pipeline --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 4 --activation gelu_tanh | triad-opt '--triad-train-pipeline=fuse-epilogues=false' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT-OFF

// The memory report follows the buffers the fused kernels leave out. In
// the training step the bare products lived for one kernel each, away
// from the peak (the backward), which stays as it is; the forward-only
// functions lose the products and, their fused GELUs keeping no input,
// the GELU's input too.
// REPORT: activations at peak (microbatch_step) 344,592 B
// REPORT: temporaries at peak (eval_step) 82,184 B
// REPORT: temporaries at peak (logits_step) 81,920 B
// REPORT-OFF: activations at peak (microbatch_step) 344,592 B
// REPORT-OFF: temporaries at peak (eval_step) 139,528 B
// REPORT-OFF: temporaries at peak (logits_step) 139,264 B

// A linear layer with the tanh GELU whose input the backward reads: one
// matmul kernel with the bias as a third input and epilogue 2 (bias, tanh
// GELU), writing the activation and, as a second result, the biased sum
// that activation_grad reads. No buffer holds the bare product.
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel broadcast(%{{.*}}) -> (%[[X:[0-9]+]])
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[W:[0-9]+]], %[[B:[0-9]+]]) -> (%[[H:[0-9]+]], %[[PRE:[0-9]+]]) ints [0, 0, 2] : (memref<2x4x8xf32>, memref<8x16xf32>, memref<16xf32>) -> (memref<2x4x16xf32>, memref<2x4x16xf32>)
// CHECK-NEXT: rt.kernel activation_grad(%[[PRE]], %[[H]]) -> (%[[DX:[0-9]+]]) ints [1]
// CHECK-NEXT: rt.kernel cross_entropy(%[[DX]], %{{.*}})
// CHECK-NOT: rt.kernel add(
// CHECK-NOT: rt.kernel activation(
// CHECK-LABEL: rt.func @apply_step
// Without fusion: the product, the add and the activation.
// OFF-LABEL: rt.func @microbatch_step
// OFF: rt.kernel matmul(%{{.*}}, %{{.*}}) -> (%[[P:[0-9]+]]) ints [0, 0] :
// OFF-NEXT: rt.kernel add(%[[P]], %{{.*}}) -> (%[[S:[0-9]+]])
// OFF-NEXT: rt.kernel activation(%[[S]]) -> (%[[A:[0-9]+]]) ints [1]
// OFF-NEXT: rt.kernel activation_grad(%[[S]], %[[A]])
// OFF-NOT: ints [0, 0, {{[0-9]}}]
triad.param @e : tensor<8xf32> init <zeros>
triad.param @w : tensor<8x16xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<8xf32>
  %x = triad.broadcast %e : tensor<8xf32> -> tensor<2x4x8xf32>
  %w = triad.get_param @w : tensor<8x16xf32>
  %p = triad.matmul %x, %w : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %s = triad.bias_add %p, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %h = triad.gelu %s approximate = tanh : tensor<2x4x16xf32>
  %dx = triad.activation_grad gelu_tanh %s, %h : tensor<2x4x16xf32>
  %loss = triad.cross_entropy %dx, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<8x16xf32>
  %n = triad.sum_squares %w : tensor<8x16xf32>
  return %n : tensor<f32>
}

// -----

// ReLU whose input nothing else reads, after a triad.add of the bias and a
// transposed weight: epilogue 3 (bias, ReLU) with one result; the
// transposes stay the first two ints.
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel matmul(%[[X:[0-9]+]], %[[W:[0-9]+]], %[[B:[0-9]+]]) -> (%[[H:[0-9]+]]) ints [0, 1, 3] : (memref<2x4x8xf32>, memref<16x8xf32>, memref<16xf32>) -> memref<2x4x16xf32>
// CHECK-NEXT: rt.kernel cross_entropy(%[[H]], %{{.*}})
// CHECK-LABEL: rt.func @apply_step
triad.param @e : tensor<8xf32> init <zeros>
triad.param @w : tensor<16x8xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<8xf32>
  %x = triad.broadcast %e : tensor<8xf32> -> tensor<2x4x8xf32>
  %w = triad.get_param @w : tensor<16x8xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %p = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %s = triad.add %p, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %h = triad.relu %s : tensor<2x4x16xf32>
  %loss = triad.cross_entropy %h, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<16x8xf32>
  %n = triad.sum_squares %w : tensor<16x8xf32>
  return %n : tensor<f32>
}

// -----

// The erf GELU, SiLU and the fast GELU have no epilogue with their
// formula: the bias joins the product (epilogue 1), the activation stays
// a kernel of its own.
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%[[S1:[0-9]+]]) ints [0, 0, 1] :
// CHECK-NEXT: rt.kernel activation(%[[S1]]) -> (%[[H1:[0-9]+]]) ints [0]
// CHECK-NEXT: rt.kernel matmul(%[[H1]], %{{.*}}, %{{.*}}) -> (%[[S2:[0-9]+]]) ints [0, 0, 1] :
// CHECK-NEXT: rt.kernel activation(%[[S2]]) -> (%[[H2:[0-9]+]]) ints [4]
// CHECK-NEXT: rt.kernel matmul(%[[H2]], %{{.*}}, %{{.*}}) -> (%[[S3:[0-9]+]]) ints [0, 0, 1] :
// CHECK-NEXT: rt.kernel activation(%[[S3]]) -> (%{{.*}}) ints [2]
// CHECK-LABEL: rt.func @apply_step
triad.param @e : tensor<16xf32> init <zeros>
triad.param @w : tensor<16x16xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<16xf32>
  %x = triad.broadcast %e : tensor<16xf32> -> tensor<2x4x16xf32>
  %w = triad.get_param @w : tensor<16x16xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %p1 = triad.matmul %x, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %s1 = triad.bias_add %p1, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %h1 = triad.gelu %s1 : tensor<2x4x16xf32>
  %p2 = triad.matmul %h1, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %s2 = triad.bias_add %p2, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %h2 = triad.silu %s2 : tensor<2x4x16xf32>
  %p3 = triad.matmul %h2, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %s3 = triad.bias_add %p3, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %h3 = triad.fast_gelu %s3 : tensor<2x4x16xf32>
  %loss = triad.cross_entropy %h3, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<16x16xf32>
  %n = triad.sum_squares %w : tensor<16x16xf32>
  return %n : tensor<f32>
}

// -----

// What does not fuse: a product something else reads too (its value must
// exist), and an add of anything but a bias vector (a [seq, hidden]
// table): both stay a matmul and an add.
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel matmul(%{{.*}}, %{{.*}}) -> (%[[P:[0-9]+]]) ints [0, 0] :
// CHECK-NEXT: rt.kernel add(%[[P]], %{{.*}}) -> (%[[S:[0-9]+]]) : (memref<2x4x16xf32>, memref<16xf32>)
// CHECK-NEXT: rt.kernel mul(%[[S]], %[[P]])
// CHECK-NEXT: rt.kernel matmul(%{{.*}}, %{{.*}}) -> (%[[Q:[0-9]+]]) ints [0, 0] :
// CHECK-NEXT: rt.kernel add(%[[Q]], %{{.*}}) -> (%{{.*}}) : (memref<2x4x16xf32>, memref<4x16xf32>)
// CHECK-LABEL: rt.func @apply_step
triad.param @e : tensor<16xf32> init <zeros>
triad.param @w : tensor<16x16xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
triad.param @pos : tensor<4x16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<16xf32>
  %x = triad.broadcast %e : tensor<16xf32> -> tensor<2x4x16xf32>
  %w = triad.get_param @w : tensor<16x16xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %pos = triad.get_param @pos : tensor<4x16xf32>
  %p = triad.matmul %x, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %s = triad.bias_add %p, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %twice = triad.mul %s, %p : tensor<2x4x16xf32>
  %q = triad.matmul %twice, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %r = triad.add %q, %pos : tensor<2x4x16xf32>, tensor<4x16xf32>
  %loss = triad.cross_entropy %r, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<16x16xf32>
  %n = triad.sum_squares %w : tensor<16x16xf32>
  return %n : tensor<f32>
}

// -----

// A product does not move past an update of a persistent tensor to its
// bias add (the update's copy would land before the product reads the
// old value), so this one stays unfused.
// CHECK-LABEL: rt.func @apply_step
// CHECK: rt.kernel matmul(%{{.*}}, %[[W:[0-9]+]]) -> (%[[P:[0-9]+]]) ints [0, 0] :
// CHECK: rt.kernel copy(%{{.*}}) -> (%[[W]])
// CHECK-NEXT: rt.kernel add(%[[P]], %{{.*}})
triad.param @e : tensor<16xf32> init <zeros>
triad.param @w : tensor<16x16xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<16xf32>
  %x = triad.broadcast %e : tensor<16xf32> -> tensor<2x4x16xf32>
  %loss = triad.cross_entropy %x, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %e = triad.get_param @e : tensor<16xf32>
  %x = triad.broadcast %e : tensor<16xf32> -> tensor<2x4x16xf32>
  %w = triad.get_param @w : tensor<16x16xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %p = triad.matmul %x, %w : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %new = triad.scale %w by 2.0 : tensor<16x16xf32>
  triad.assign @w, %new : tensor<16x16xf32>
  %s = triad.bias_add %p, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %n = triad.sum_squares %s : tensor<2x4x16xf32>
  return %n : tensor<f32>
}

// -----

// The backward of a linear layer under the tanh GELU: the product that is
// the GELU output's gradient, the GELU's gradient at its input and that
// summed over the rows (the bias gradient) are one matmul with epilogue 4,
// reading the activation's input as a third input and writing the bias
// gradient ([16], the sum's own type) as a second result, where the
// activation's gradient was: the sum moves up to it. No buffer holds the
// bare product. The ReLU's gradient (cuBLASLt's reads a bit mask) and the
// erf GELU's stay kernels of their own, as does a sum over other
// dimensions.
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel matmul(%[[X:[0-9]+]], %[[W:[0-9]+]]) -> (%[[PRE:[0-9]+]]) ints [0, 1] :
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[W]], %[[PRE]]) -> (%[[G:[0-9]+]], %[[DB:[0-9]+]]) ints [0, 1, 4] : (memref<2x4x8xf32>, memref<16x8xf32>, memref<2x4x16xf32>) -> (memref<2x4x16xf32>, memref<16xf32>)
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[W]]) -> (%[[P2:[0-9]+]]) ints [0, 1] :
// CHECK-NEXT: rt.kernel activation_grad(%[[PRE]], %[[P2]]) -> (%[[G2:[0-9]+]]) ints [3]
// CHECK-NEXT: rt.kernel sum(%[[G2]])
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[W]]) -> (%[[P3:[0-9]+]]) ints [0, 1] :
// CHECK-NEXT: rt.kernel activation_grad(%[[PRE]], %[[P3]]) -> (%{{.*}}) ints [0]
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[W]], %[[PRE]]) -> (%[[G4:[0-9]+]]) ints [0, 1, 4] :
// CHECK-NEXT: rt.kernel sum(%[[G4]]) -> (%{{.*}}) floats [1.000000e+00] : (memref<2x4x16xf32>) -> memref<1x4x16xf32>
// CHECK-NOT: rt.kernel sum(%[[G]])
// CHECK-LABEL: rt.func @apply_step
// OFF-LABEL: rt.func @microbatch_step
// OFF-NOT: ints [0, 1, 4]
// OFF-LABEL: rt.func @apply_step
triad.param @e : tensor<8xf32> init <zeros>
triad.param @w : tensor<16x8xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<8xf32>
  %x = triad.broadcast %e : tensor<8xf32> -> tensor<2x4x8xf32>
  %w = triad.get_param @w : tensor<16x8xf32>
  %pre = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %dy = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %g = triad.activation_grad gelu_tanh %pre, %dy : tensor<2x4x16xf32>
  %db = triad.sum %g dims = [0, 1] : tensor<2x4x16xf32> -> tensor<16xf32>
  %dy2 = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %g2 = triad.activation_grad relu %pre, %dy2 : tensor<2x4x16xf32>
  %db2 = triad.sum %g2 dims = [0, 1] : tensor<2x4x16xf32> -> tensor<16xf32>
  %dy3 = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %g3 = triad.activation_grad gelu %pre, %dy3 : tensor<2x4x16xf32>
  %dy4 = triad.matmul %x, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %g4 = triad.activation_grad gelu_tanh %pre, %dy4 : tensor<2x4x16xf32>
  %db4 = triad.sum %g4 dims = [0] : tensor<2x4x16xf32> -> tensor<4x16xf32>
  %s1 = triad.add %g, %g2 : tensor<2x4x16xf32>, tensor<2x4x16xf32>
  %s2 = triad.add %g3, %g4 : tensor<2x4x16xf32>, tensor<2x4x16xf32>
  %s3 = triad.add %s1, %s2 : tensor<2x4x16xf32>, tensor<2x4x16xf32>
  %b1 = triad.add %s3, %db : tensor<2x4x16xf32>, tensor<16xf32>
  %b2 = triad.add %b1, %db2 : tensor<2x4x16xf32>, tensor<16xf32>
  %b3 = triad.add %b2, %db4 : tensor<2x4x16xf32>, tensor<4x16xf32>
  %loss = triad.cross_entropy %b3, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<16x8xf32>
  %n = triad.sum_squares %w : tensor<16x8xf32>
  return %n : tensor<f32>
}

// -----

// A reader of the biased sum before the activation would read it before
// the kernel writes it: the GELU then stays its own kernel, the bias joins
// the product (epilogue 1).
// CHECK-LABEL: rt.func @microbatch_step
// CHECK: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%[[S:[0-9]+]]) ints [0, 0, 1] :
// CHECK-NEXT: rt.kernel sum_squares(%[[S]])
// CHECK-NEXT: rt.kernel activation(%[[S]]) -> (%{{.*}}) ints [1]
// CHECK-LABEL: rt.func @apply_step
triad.param @e : tensor<8xf32> init <zeros>
triad.param @w : tensor<8x16xf32> init <zeros>
triad.param @b : tensor<16xf32> init <zeros>
func.func @microbatch_step(%t: tensor<2x4xi32> {triad.input = "tokens"}, %l: tensor<2x4xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) {
  %e = triad.get_param @e : tensor<8xf32>
  %x = triad.broadcast %e : tensor<8xf32> -> tensor<2x4x8xf32>
  %w = triad.get_param @w : tensor<8x16xf32>
  %b = triad.get_param @b : tensor<16xf32>
  %p = triad.matmul %x, %w : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %s = triad.bias_add %p, %b : tensor<2x4x16xf32>, tensor<16xf32>
  %n = triad.sum_squares %s : tensor<2x4x16xf32>
  %h = triad.gelu %s approximate = tanh : tensor<2x4x16xf32>
  %hn = triad.scale %h by 1.0 : tensor<2x4x16xf32>
  %loss = triad.cross_entropy %hn, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  %total = triad.add %loss, %n : tensor<f32>, tensor<f32>
  return %total : tensor<f32>
}
func.func @apply_step() -> (tensor<f32> {triad.output = "grad_norm"}) {
  %w = triad.get_param @w : tensor<8x16xf32>
  %n = triad.sum_squares %w : tensor<8x16xf32>
  return %n : tensor<f32>
}
