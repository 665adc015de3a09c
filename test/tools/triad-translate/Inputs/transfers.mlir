// Two pipeline ranks under a 1F1B schedule of one microbatch: rank 0 sends
// an activation to rank 1 and receives its gradient back, rank 1 mirrors
// it. The forward and backward passes are left out (actions without
// calls); each transfer action has its call.
rt.plan mesh ["dp", "pp", "tp"] = [1, 2, 1] seq 4 vocab 16 batch 2 microbatches 1 schedule "1f1b" virtual_stages 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<2x4x8xf32>
  %g = rt.buffer 256 : memref<2x4x8xf32>
  rt.func @send_act args() kinds [] results() names [] {
    rt.kernel send(%x) -> () ints [1, 0] : (memref<2x4x8xf32>) -> ()
  }
  rt.func @recv_grad args() kinds [] results() names [] {
    rt.kernel recv() -> (%g) ints [1, 1] : () -> memref<2x4x8xf32>
  }
  rt.step [@send_act, @recv_grad] microbatches [0, 0] actions ["F0.0", "send-act0.0>1", "recv-grad0.0<1", "B0.0", "reduce-grads", "optimizer"] at [1, 2]
}
rt.program @rank1 pipeline_rank 1 arena 4096 {
  %x = rt.buffer 0 : memref<2x4x8xf32>
  rt.func @recv_act args() kinds [] results() names [] {
    rt.kernel recv() -> (%x) ints [0, 0] : () -> memref<2x4x8xf32>
  }
  rt.func @send_grad args() kinds [] results() names [] {
    rt.kernel send(%x) -> () ints [0, 1] : (memref<2x4x8xf32>) -> ()
  }
  rt.step [@recv_act, @send_grad] microbatches [0, 0] actions ["recv-act1.0<0", "F1.0", "B1.0", "send-grad1.0>0", "reduce-grads", "optimizer"] at [0, 3]
}
