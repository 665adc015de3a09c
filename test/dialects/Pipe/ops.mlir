// Round trip of the pipe dialect, in the custom and in the generic form:
// stages, a transfer each way, the stage and tied attributes, stage
// functions with their kept values and transfers, and a schedule using every
// action.
// RUN: triad-opt %s | triad-opt | FileCheck %s
// RUN: triad-opt %s --mlir-print-op-generic | triad-opt | FileCheck %s

// CHECK: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"] flops 100 bytes 40
// CHECK: pipe.stage 1 on rank 1 layers ["transformer 1", "head 0"] flops 120 bytes 48
pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"] flops 100 bytes 40
pipe.stage 1 on rank 1 layers ["transformer 1", "head 0"] flops 120 bytes 48

// CHECK-LABEL: func.func @step
// CHECK: %[[A:.*]] = pipe.transfer %arg0 from 0 to 1 : tensor<2x4xf32>
// CHECK: %[[G:.*]] = pipe.transfer %{{.*}} from 1 to 0 : tensor<2x4xf32>
// CHECK: triad.add %arg0, %[[G]] {pipe.stage = 0 : i64}
// CHECK: triad.add %{{.*}}, %{{.*}} {pipe.tied = array<i64: 0, 1>}
func.func @step(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %a = pipe.transfer %x from 0 to 1 : tensor<2x4xf32>
  %b = triad.add %a, %a {pipe.stage = 1 : i64} : tensor<2x4xf32>, tensor<2x4xf32>
  %g = pipe.transfer %b from 1 to 0 : tensor<2x4xf32>
  %c = triad.add %x, %g {pipe.stage = 0 : i64} : tensor<2x4xf32>, tensor<2x4xf32>
  %t = triad.add %b, %c {pipe.tied = array<i64: 0, 1>} : tensor<2x4xf32>, tensor<2x4xf32>
  return %c, %t : tensor<2x4xf32>, tensor<2x4xf32>
}

// CHECK: pipe.schedule "zb-h1" microbatches 1 virtual_stages 1 {
// CHECK-NEXT: pipe.rank 0 {
// CHECK-NEXT: pipe.forward stage 0 microbatch 0
// CHECK-NEXT: pipe.send activation stage 0 microbatch 0 to 1
// CHECK-NEXT: pipe.recv gradient stage 0 microbatch 0 from 1
// CHECK-NEXT: pipe.backward_input stage 0 microbatch 0
// CHECK-NEXT: pipe.backward_weight stage 0 microbatch 0
// CHECK-NEXT: pipe.reduce_gradients
// CHECK-NEXT: pipe.optimizer
// CHECK-NEXT: }
// CHECK-NEXT: pipe.rank 1 {
// CHECK-NEXT: pipe.recv activation stage 1 microbatch 0 from 0
// CHECK-NEXT: pipe.forward stage 1 microbatch 0
// CHECK-NEXT: pipe.backward stage 1 microbatch 0
// CHECK-NEXT: pipe.send gradient stage 1 microbatch 0 to 0
// CHECK-NEXT: pipe.reduce_gradients
// CHECK-NEXT: pipe.optimizer
pipe.schedule "zb-h1" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    pipe.forward stage 0 microbatch 0
    pipe.send activation stage 0 microbatch 0 to 1
    pipe.recv gradient stage 0 microbatch 0 from 1
    pipe.backward_input stage 0 microbatch 0
    pipe.backward_weight stage 0 microbatch 0
    pipe.reduce_gradients
    pipe.optimizer
  }
  pipe.rank 1 {
    pipe.recv activation stage 1 microbatch 0 from 0
    pipe.forward stage 1 microbatch 0
    pipe.backward stage 1 microbatch 0
    pipe.send gradient stage 1 microbatch 0 to 0
    pipe.reduce_gradients
    pipe.optimizer
  }
}

// CHECK-LABEL: func.func @forward_s0
// CHECK-SAME: attributes {pipe.stage = 0 : i64, pipe.work = "forward"}
// CHECK: pipe.stash %arg0 as 0 : tensor<2x4xf32>
func.func @forward_s0(%x: tensor<2x4xf32>) attributes {pipe.stage = 0 : i64, pipe.work = "forward"} {
  pipe.stash %x as 0 : tensor<2x4xf32>
  return
}
// CHECK-LABEL: func.func @send_act_s0
// CHECK: %[[K:.*]] = pipe.unstash 0 : tensor<2x4xf32>
// CHECK: pipe.send_tensor %[[K]] to stage 1 : tensor<2x4xf32>
func.func @send_act_s0() attributes {pipe.stage = 0 : i64, pipe.work = "send_activation"} {
  %x = pipe.unstash 0 : tensor<2x4xf32>
  pipe.send_tensor %x to stage 1 : tensor<2x4xf32>
  return
}
// CHECK-LABEL: func.func @recv_grad_s0
// CHECK: %[[R:.*]] = pipe.recv_tensor from stage 1 : tensor<2x4xf32>
// CHECK: pipe.stash %[[R]] as 1 : tensor<2x4xf32>
func.func @recv_grad_s0() attributes {pipe.stage = 0 : i64, pipe.work = "recv_gradient"} {
  %g = pipe.recv_tensor from stage 1 : tensor<2x4xf32>
  pipe.stash %g as 1 : tensor<2x4xf32>
  return
}
// CHECK-LABEL: func.func @recv_act_s1
// CHECK: pipe.recv_tensor from stage 0 : tensor<2x4xf32>
func.func @recv_act_s1() attributes {pipe.stage = 1 : i64, pipe.work = "recv_activation"} {
  %a = pipe.recv_tensor from stage 0 : tensor<2x4xf32>
  pipe.stash %a as 0 : tensor<2x4xf32>
  return
}
// CHECK-LABEL: func.func @send_grad_s1
// CHECK: pipe.send_tensor %{{.*}} to stage 0 : tensor<2x4xf32>
func.func @send_grad_s1() attributes {pipe.stage = 1 : i64, pipe.work = "send_gradient"} {
  %g = pipe.unstash 1 : tensor<2x4xf32>
  pipe.send_tensor %g to stage 0 : tensor<2x4xf32>
  return
}
