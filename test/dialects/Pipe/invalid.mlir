// Every diagnostic of the pipe dialect: the stage and tied attributes, the
// stage and transfer ops, the stage functions' work attribute and ops, and
// the schedule's structure and its static check
// (out of order, missing inputs, unmatched transfers, deadlock).
// RUN: triad-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'pipe.stage' must be a non-negative i64 stage index}}
  %y = triad.add %x, %x {pipe.stage = -1 : i64} : tensor<2xf32>, tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'pipe.stage' must be a non-negative i64 stage index}}
  %y = triad.add %x, %x {pipe.stage = "one"} : tensor<2xf32>, tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'pipe.tied' must list at least two distinct stages in ascending order}}
  %y = triad.add %x, %x {pipe.tied = array<i64: 1, 0>} : tensor<2xf32>, tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'pipe.tied' must list at least two distinct stages in ascending order}}
  %y = triad.add %x, %x {pipe.tied = array<i64: 0>} : tensor<2xf32>, tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{has unknown pipe attribute 'pipe.stages'}}
  %y = triad.add %x, %x {pipe.stages = 1 : i64} : tensor<2xf32>, tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// expected-error @+1 {{stage 0 has no layers}}
pipe.stage 0 on rank 0 layers [] flops 1 bytes 1

// -----

// expected-error @+1 {{stage 1 cannot run on pipeline rank 2: stage s runs on rank s mod pp}}
pipe.stage 1 on rank 2 layers ["head 0"] flops 1 bytes 1

// -----

func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{moves a value from stage 0 to stage 2; values cross one stage boundary at a time}}
  %y = pipe.transfer %x from 0 to 2 : tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// expected-error @+1 {{lists no pipeline ranks}}
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
}

// -----

pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  // expected-error @+1 {{lists rank 1 where rank 0 comes next}}
  pipe.rank 1 {
  }
}

// -----

pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    // expected-error @+1 {{'pipe.stage' op is not a pipeline action (forward, backward, send, recv, ...) of a pipe.rank}}
    pipe.stage 0 on rank 0 layers ["head 0"] flops 1 bytes 1
  }
}

// -----

// One rank alone, whose backward comes before its forward.
// expected-error @+1 {{rank 0: action 0 (B0.0)}}
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    pipe.backward stage 0 microbatch 0
    pipe.forward stage 0 microbatch 0
    pipe.reduce_gradients
    pipe.optimizer
  }
}

// -----

// A send without its receive.
// expected-error @+1 {{send-act0.0>1}}
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    pipe.forward stage 0 microbatch 0
    pipe.send activation stage 0 microbatch 0 to 1
    pipe.recv gradient stage 0 microbatch 0 from 1
    pipe.backward stage 0 microbatch 0
    pipe.reduce_gradients
    pipe.optimizer
  }
  pipe.rank 1 {
    pipe.forward stage 1 microbatch 0
    pipe.backward stage 1 microbatch 0
    pipe.send gradient stage 1 microbatch 0 to 0
    pipe.reduce_gradients
    pipe.optimizer
  }
}

// -----

// Both ranks wait for the other first: the check names the stuck action of
// each rank.
// expected-error @+1 {{pipeline schedule '1f1b' (2 ranks, 1 microbatch) deadlocks: rank 0 is stuck at recv gradient of microbatch 0 from rank 1 (stage 1 -> 0); rank 1 is stuck at recv activation of microbatch 0 from rank 0 (stage 0 -> 1)}}
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    pipe.forward stage 0 microbatch 0
    pipe.recv gradient stage 0 microbatch 0 from 1
    pipe.send activation stage 0 microbatch 0 to 1
    pipe.backward stage 0 microbatch 0
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

// -----

// expected-error @+1 {{'pipe.schedule' op attribute 'microbatches' failed to satisfy constraint}}
pipe.schedule "1f1b" microbatches 0 virtual_stages 1 {
  pipe.rank 0 {
  }
}

// -----

pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    // expected-error @+1 {{'pipe.forward' op attribute 'stage' failed to satisfy constraint}}
    pipe.forward stage -1 microbatch 0
  }
}

// -----

// Numbers the runtime's int-based schedule cannot hold are not truncated.
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    // expected-error @+1 {{'pipe.forward' op 'microbatch' is 4294967296; schedules count stages, microbatches and ranks up to 2147483647}}
    pipe.forward stage 0 microbatch 4294967296
  }
}

// -----

// expected-error @+1 {{'pipe.schedule' op 'microbatches' is 4294967297; schedules count stages, microbatches and ranks up to 2147483647}}
pipe.schedule "1f1b" microbatches 4294967297 virtual_stages 1 {
  pipe.rank 0 {
  }
}

// -----

// expected-error @+1 {{'pipe.work' must name a stage function's work (forward, backward, backward_input, backward_weight, send_activation, recv_activation, send_gradient or recv_gradient)}}
func.func @f() attributes {pipe.stage = 0 : i64, pipe.work = "sideways"} {
  return
}

// -----

// expected-error @+1 {{has 'pipe.work' but no 'pipe.stage': a stage function names its stage}}
func.func @f() attributes {pipe.work = "forward"} {
  return
}

// -----

func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{'pipe.stash' op belongs in a stage function (a function with 'pipe.stage' and 'pipe.work')}}
  pipe.stash %x as 0 : tensor<2xf32>
  return
}

// -----

func.func @f() -> tensor<2xf32> attributes {pipe.stage = 0 : i64} {
  // expected-error @+1 {{'pipe.unstash' op belongs in a stage function (a function with 'pipe.stage' and 'pipe.work')}}
  %x = pipe.unstash 0 : tensor<2xf32>
  return %x : tensor<2xf32>
}

// -----

func.func @f(%x: tensor<2xf32>) attributes {pipe.stage = 0 : i64, pipe.work = "send_activation"} {
  // expected-error @+1 {{'pipe.stash' op in a send_activation function: a send function only reads kept values}}
  pipe.stash %x as 0 : tensor<2xf32>
  return
}

// -----

func.func @f() attributes {pipe.stage = 1 : i64, pipe.work = "recv_gradient"} {
  // expected-error @+1 {{'pipe.unstash' op in a recv_gradient function: a receive function only keeps what it receives}}
  %x = pipe.unstash 0 : tensor<2xf32>
  return
}

// -----

func.func @f(%x: tensor<2xf32>) attributes {pipe.stage = 0 : i64, pipe.work = "forward"} {
  // expected-error @+1 {{'pipe.send_tensor' op in a forward function; it belongs in a send_activation or send_gradient function}}
  pipe.send_tensor %x to stage 1 : tensor<2xf32>
  return
}

// -----

func.func @f(%x: tensor<2xf32>) attributes {pipe.stage = 2 : i64, pipe.work = "send_gradient"} {
  // expected-error @+1 {{'pipe.send_tensor' op of stage 2's send_gradient function sends to stage 3; it sends to stage 1}}
  pipe.send_tensor %x to stage 3 : tensor<2xf32>
  return
}

// -----

func.func @f() attributes {pipe.stage = 1 : i64, pipe.work = "backward"} {
  // expected-error @+1 {{'pipe.recv_tensor' op in a backward function; it belongs in a recv_activation or recv_gradient function}}
  %x = pipe.recv_tensor from stage 0 : tensor<2xf32>
  return
}

// -----

func.func @f() attributes {pipe.stage = 1 : i64, pipe.work = "recv_activation"} {
  // expected-error @+1 {{'pipe.recv_tensor' op of stage 1's recv_activation function receives from stage 2; it receives from stage 0}}
  %x = pipe.recv_tensor from stage 2 : tensor<2xf32>
  return
}
