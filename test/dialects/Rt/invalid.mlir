// RUN: triad-opt %s -split-input-file -verify-diagnostics
// The mesh lists one size per axis.
// expected-error@+1 {{'rt.plan' op has 2 mesh axes but 1 sizes}}
rt.plan mesh ["dp", "tp"] = [1] seq 4 vocab 16 batch 2 microbatches 1

// -----

// Mesh axis names are distinct.
// expected-error@+1 {{'rt.plan' op mesh axis 'dp' appears twice}}
rt.plan mesh ["dp", "dp"] = [1, 1] seq 4 vocab 16 batch 2 microbatches 1

// -----

// Mesh axes have at least one rank.
// expected-error@+1 {{'rt.plan' op mesh axis 'tp' has size 0; sizes must be at least 1}}
rt.plan mesh ["dp", "tp"] = [1, 0] seq 4 vocab 16 batch 2 microbatches 1

// -----

// The data sizes are positive.
// expected-error@+1 {{'rt.plan' op seq is 0; it must be at least 1}}
rt.plan mesh ["dp"] = [1] seq 0 vocab 16 batch 2 microbatches 1

// -----

// Every replica's microbatches get whole sequences.
// expected-error@+1 {{'rt.plan' op batch 6 is not divisible by dp (2) times microbatches (2)}}
rt.plan mesh ["dp"] = [2] seq 4 vocab 16 batch 6 microbatches 2

// -----

// A padded vocabulary is no smaller than the vocabulary, and a multiple of
// tp.
// expected-error@+1 {{'rt.plan' op padded vocabulary 8 must be a multiple of tp (1) no smaller than the vocabulary (16) and below 2^31}}
rt.plan mesh ["dp"] = [1] seq 4 vocab 16 padded 8 batch 2 microbatches 1

// -----

// expected-error@+1 {{'rt.plan' op padded vocabulary 17 must be a multiple of tp (2)}}
rt.plan mesh ["dp", "tp"] = [1, 2] seq 4 vocab 16 padded 17 batch 2 microbatches 1

// -----

// A program has exactly one step.
// expected-error@+1 {{'rt.program' op must hold exactly one rt.step, found 0}}
rt.program @rank0 pipeline_rank 0 arena 4096 {
}

// -----

// Persistent tensor names are unique.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  %b = rt.buffer 64 : memref<4xf32>
  rt.persistent "w" parameter %a global [4] offsets [0] init <zeros> : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op persistent tensor 'w' is declared twice}}
  rt.persistent "w" parameter %b global [4] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A buffer holds at most one persistent tensor.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  rt.persistent "w" parameter %a global [4] offsets [0] init <zeros> : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op buffer already holds another persistent tensor}}
  rt.persistent "u" parameter %a global [4] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// Buffer offsets are aligned.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op offset 4 is not a non-negative multiple of 64}}
  %a = rt.buffer 4 : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// Buffers stay inside the arena.
rt.program @rank0 pipeline_rank 0 arena 100 {
  // expected-error@+1 {{'rt.buffer' op its 64 bytes at offset 64 extend past the arena of 100 bytes}}
  %a = rt.buffer 64 : memref<16xf32>
  rt.step [] microbatches []
}

// -----

// Buffers are contiguous tensors of the runtime's element types.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op result #0 must be statically shaped, contiguous memref of f32, bf16, f16 or i32}}
  %a = rt.buffer 0 : memref<4xf64>
  rt.step [] microbatches []
}

// -----

// A persistent tensor's global shape has its buffer's rank.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op global shape and offsets must have the buffer's rank 1}}
  rt.persistent "w" parameter %a global [4, 1] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A persistent tensor's slice lies inside the global tensor.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op the slice of dimension 0 ([6, 10)) is outside the global size 8}}
  rt.persistent "w" parameter %a global [8] offsets [6] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A padded tensor's pieces tile its padded shape, which holds the global
// one.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op the slice of dimension 0 ([6, 10)) is outside the padded size 9}}
  rt.persistent "w" parameter %a global [8] padded [9] offsets [6] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op padded dimension 0 (6) is smaller than the global 8}}
  rt.persistent "w" parameter %a global [8] padded [6] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op padded shape must have the buffer's rank 1}}
  rt.persistent "w" parameter %a global [8] padded [8, 1] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// Accumulators are float zeros.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op accumulator 'g' must be a float tensor (f32, bf16 or f16) and start at zeros}}
  rt.persistent "g" accumulator %a global [4] offsets [0] init <ones> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// One kind per argument.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %t = rt.buffer 0 : memref<2x4xi32>
  // expected-error@+1 {{'rt.func' op has 1 arguments but 0 argument kinds}}
  rt.func @f args(%t : memref<2x4xi32>) kinds [] results() names [] {
  }
  rt.step [] microbatches []
}

// -----

// Argument kinds are tokens or labels.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %t = rt.buffer 0 : memref<2x4xi32>
  // expected-error@+1 {{'rt.func' op argument kind 'images' is unknown (expected tokens, labels or prefix_lengths)}}
  rt.func @f args(%t : memref<2x4xi32>) kinds ["images"] results() names [] {
  }
  rt.step [] microbatches []
}

// -----

// Arguments hold token ids.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %t = rt.buffer 0 : memref<2x4xf32>
  // expected-error@+1 {{'rt.func' op arguments hold token ids and must be i32 buffers}}
  rt.func @f args(%t : memref<2x4xf32>) kinds ["tokens"] results() names [] {
  }
  rt.step [] microbatches []
}

// -----

// One name per result.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<f32>
  // expected-error@+1 {{'rt.func' op has 1 results but 0 result names}}
  rt.func @f args() kinds [] results(%n : memref<f32>) names [] {
  }
  rt.step [] microbatches []
}

// -----

// Result names are distinct.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<f32>
  // expected-error@+1 {{'rt.func' op result names must be non-empty and distinct}}
  rt.func @f args() kinds [] results(%n, %n : memref<f32>, memref<f32>) names ["loss", "loss"] {
  }
  rt.step [] microbatches []
}

// -----

// A kernel writes something.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op writes no output}}
    rt.kernel sum_squares(%n) -> () : (memref<f32>) -> ()
  }
  rt.step [] microbatches []
}

// -----

// AdamW updates f32 weights and moments (a 16-bit gradient, summed in the
// parameter's type, is widened as it is read: ops.mlir).
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %w = rt.buffer 0 : memref<16xf32>
  %m = rt.buffer 64 : memref<16xbf16>
  %g = rt.buffer 128 : memref<16xbf16>
  %n = rt.buffer 192 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'adamw': AdamW runs on f32 weights and moments}}
    rt.kernel adamw(%w, %g, %m, %m, %n, %n, %n) -> (%w, %m, %m) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<16xf32>, memref<16xbf16>, memref<16xbf16>, memref<16xbf16>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16xf32>, memref<16xbf16>, memref<16xbf16>)
  }
  rt.step [] microbatches []
}

// -----

// A send reads one buffer and writes none.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<4xf32>
  %m = rt.buffer 64 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'send' reads one input and writes no output}}
    rt.kernel send(%n) -> (%m) ints [1, 0] : (memref<4xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// A recv reads nothing and writes one buffer.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'recv' reads no input and writes one output}}
    rt.kernel recv(%n) -> (%n) ints [1, 0] : (memref<4xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Only updating kernels write in place.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %n = rt.buffer 0 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'activation' cannot write an output in place of an input}}
    rt.kernel activation(%n) -> (%n) ints [3] : (memref<4xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Accumulate adds into its first input.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  %b = rt.buffer 64 : memref<4xf32>
  %w = rt.buffer 128 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op accumulate must write its first input in place}}
    rt.kernel accumulate(%a, %b, %w) -> (%b) : (memref<4xf32>, memref<4xf32>, memref<f32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// One microbatch index per call.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.step' op has 0 calls but 1 microbatch indices}}
  rt.step [] microbatches [0]
}

// -----

// Calls name functions of the program.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.step' op calls @missing, which is no rt.func here}}
  rt.step [@missing] microbatches [0]
}

// -----

// Microbatch indices are below the plan's microbatch count.
rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  rt.func @f args() kinds [] results() names [] {
  }
  // expected-error@+1 {{'rt.step' op microbatch 1 of the call of @f is outside [0, 1)}}
  rt.step [@f] microbatches [1]
}

// -----

// Offsets near the integer limit do not wrap around the arena check.
rt.program @rank0 pipeline_rank 0 arena 128 {
  // expected-error@+1 {{'rt.buffer' op its 64 bytes at offset 9223372036854775744 extend past the arena of 128 bytes}}
  %a = rt.buffer 9223372036854775744 : memref<16xf32>
  rt.step [] microbatches []
}

// -----

// Kernels and functions name rt.buffer values only.
rt.program @rank0 pipeline_rank 0 arena 128 {
  rt.func @f args() kinds [] results() names [] {
    %c = builtin.unrealized_conversion_cast to memref<2xf32>
    // expected-error@+1 {{'rt.kernel' op operands must be rt.buffer values}}
    rt.kernel fill() -> (%c) floats [0.0] : () -> memref<2xf32>
  }
  rt.step [] microbatches []
}

// -----

// A slotted buffer names both its slots and their stride.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op has slots without a stride, or the other way round}}
  %a = "rt.buffer"() {offset = 0 : i64, slots = 2 : i64} : () -> memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A slotted buffer has at least one slot.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op has 0 slots; it needs 1 to 65536}}
  %a = rt.buffer 0 slots 0 stride 64 : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// The copies of a slotted buffer do not overlap.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op stride 64 must be a multiple of 64 and at least the buffer's 128 bytes}}
  %a = rt.buffer 0 slots 2 stride 64 : memref<32xf32>
  rt.step [] microbatches []
}

// -----

// Every copy of a slotted buffer is aligned.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  // expected-error@+1 {{'rt.buffer' op stride 100 must be a multiple of 64 and at least the buffer's 16 bytes}}
  %a = rt.buffer 0 slots 2 stride 100 : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// Every copy of a slotted buffer lies inside the arena.
rt.program @rank0 pipeline_rank 0 arena 256 {
  // expected-error@+1 {{'rt.buffer' op its 16 bytes at offset 64 in 4 slots extend past the arena of 256 bytes}}
  %a = rt.buffer 64 slots 4 stride 64 : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A persistent tensor has one copy.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 slots 2 stride 64 : memref<4xf32>
  // expected-error@+1 {{'rt.persistent' op buffer must not be slotted: one copy of 'w' lives between steps}}
  rt.persistent "w" parameter %a global [4] offsets [0] init <zeros> : memref<4xf32>
  rt.step [] microbatches []
}

// -----

// A call's slot is below the runtime's limit (each buffer serves it with
// its copy slot mod its slots).
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 slots 2 stride 64 : memref<4xf32>
  %b = rt.buffer 1024 slots 3 stride 64 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel scale(%a) -> (%b) floats [2.0] : (memref<4xf32>) -> memref<4xf32>
  }
  // expected-error@+1 {{'rt.step' op slot 65536 of the call of @f is outside [0, 65536)}}
  rt.step [@f, @f] microbatches [0, 0] slots [5, 65536]
}

// -----

// The step gives every call a slot, or none.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  rt.func @f args() kinds [] results() names [] {
  }
  // expected-error@+1 {{'rt.step' op has 2 calls but 1 slot indices}}
  rt.step [@f, @f] microbatches [0, 0] slots [0]
}

// -----

// A function without slotted buffers has the one slot 0.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  rt.func @g args() kinds [] results() names [] {
  }
  // expected-error@+1 {{'rt.step' op slot 1 of the call of @g is outside [0, 1)}}
  rt.step [@g] microbatches [0] slots [1]
}

// -----

// The runtime's kernel contract (runtime/plan/KernelContract.h), which the
// plan loader applies too: the number of operands and attributes.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': expects 2 inputs, 1 outputs, 2 ints and 0 floats; has 2, 1, 1 and 0}}
    rt.kernel matmul(%a, %b) -> (%c) ints [0] : (memref<4x8xf32>, memref<8x4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// A bucket of all-gathers has an output and a dimension per input.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<8x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'all_gather': expects N inputs, N outputs (N >= 1) and N + 1 ints (group, then one dimension per input); has 2, 1 and 2}}
    rt.kernel all_gather(%a, %b) -> (%c) ints [0, 0] : (memref<4x8xf32>, memref<8x4xf32>) -> memref<8x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// Element types: embedding ids are i32.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %ids = rt.buffer 0 : memref<2x4xf32>
  %table = rt.buffer 64 : memref<16x8xf32>
  %x = rt.buffer 1024 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'embedding': expects i32 ids and a [vocab, hidden] table}}
    rt.kernel embedding(%ids, %table) -> (%x) : (memref<2x4xf32>, memref<16x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// An AdamW over two tensors: a weight decay per tensor.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %w = rt.buffer 0 : memref<16xf32>
  %v = rt.buffer 64 : memref<16xf32>
  %n = rt.buffer 192 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'adamw': expects 4 N + 3 or 4 N + 4 inputs (param, grad, m, v per tensor, then lr, step, coefficient[, skip]), 3 N or 4 N outputs (param', m', v'[, the 16-bit param] per tensor), no ints and 3 + N floats (beta1, beta2, epsilon, a weight decay per tensor), N >= 1; has 11, 6, 0 and 4}}
    rt.kernel adamw(%w, %v, %v, %v, %w, %v, %v, %v, %n, %n, %n) -> (%w, %v, %v, %w, %v, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>)
  }
  rt.step [] microbatches []
}

// -----

// The parameter an AdamW rounds is bf16 or f16.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %w = rt.buffer 0 : memref<16xf32>
  %v = rt.buffer 64 : memref<16xf32>
  %c = rt.buffer 128 : memref<16xf32>
  %n = rt.buffer 192 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'adamw': the rounded parameter must be bf16 or f16 with the parameter's shape}}
    rt.kernel adamw(%w, %v, %v, %v, %n, %n, %n) -> (%w, %v, %v, %c) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16xf32>, memref<16xf32>, memref<16xf32>, memref<16xf32>)
  }
  rt.step [] microbatches []
}

// -----

// A sum of squares over several tensors takes float ones only.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  %i = rt.buffer 64 : memref<4xi32>
  %n = rt.buffer 128 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'sum_squares': input 1 must be a float tensor}}
    rt.kernel sum_squares(%x, %i) -> (%n) : (memref<4xf32>, memref<4xi32>) -> memref<f32>
  }
  rt.step [] microbatches []
}

// -----

// Element types: a float operand, named by its place in the kernel.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xi32>
  %n = rt.buffer 64 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'sum_squares': input 0 must be a float tensor}}
    rt.kernel sum_squares(%x) -> (%n) : (memref<4xi32>) -> memref<f32>
  }
  rt.step [] microbatches []
}

// -----

// A sum of squares' limit is positive, and it is the only float.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  %n = rt.buffer 64 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'sum_squares': limit must be positive, got -1}}
    rt.kernel sum_squares(%x) -> (%n) floats [-1.0] : (memref<4xf32>) -> memref<f32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  %n = rt.buffer 64 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'sum_squares': expects N inputs (N >= 1), 1 output, no ints and at most 1 float (the limit); has 1, 1, 0 and 2}}
    rt.kernel sum_squares(%x) -> (%n) floats [1.0, 2.0] : (memref<4xf32>) -> memref<f32>
  }
  rt.step [] microbatches []
}

// -----

// Shapes: a scalar where the kernel reads one.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  %s = rt.buffer 64 : memref<2xf32>
  %y = rt.buffer 128 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'scale_by': input 1 must be an f32 scalar}}
    rt.kernel scale_by(%x, %s) -> (%y) : (memref<4xf32>, memref<2xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Ranks: a matmul multiplies matrices.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': operands must be matrices (rhs of rank 2 or of lhs)}}
    rt.kernel matmul(%a, %b) -> (%c) ints [0, 0] : (memref<8xf32>, memref<8x4xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// An epilogue code is one of KernelCodes.h's.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': unknown epilogue 8 (0 to 7)}}
    rt.kernel matmul(%a, %b, %bias) -> (%c) ints [0, 0, 8] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// The accumulating epilogue (5): c is its accumulator, written in place;
// no other product writes over an input.
rt.program @accumulating pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 128 : memref<8x4xbf16>
  %acc = rt.buffer 256 : memref<4x4xf32>
  %w = rt.buffer 320 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul' cannot write an output in place of an input}}
    rt.kernel matmul(%a, %b, %acc, %w) -> (%acc) ints [0, 0] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xf32>, memref<f32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @accumulating_elsewhere pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 128 : memref<8x4xbf16>
  %acc = rt.buffer 256 : memref<4x4xf32>
  %w = rt.buffer 320 : memref<f32>
  %c = rt.buffer 384 : memref<4x4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the result must be the accumulator (input 2) itself}}
    rt.kernel matmul(%a, %b, %acc, %w) -> (%c) ints [0, 0, 5] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xf32>, memref<f32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @accumulating_weight pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 128 : memref<8x4xbf16>
  %acc = rt.buffer 256 : memref<4x4xf32>
  %w = rt.buffer 320 : memref<1xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the weight (input 3) must be an f32 scalar}}
    rt.kernel matmul(%a, %b, %acc, %w) -> (%acc) ints [0, 0, 5] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xf32>, memref<1xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @accumulating_type pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 128 : memref<8x4xbf16>
  %acc = rt.buffer 256 : memref<4x4xf16>
  %w = rt.buffer 320 : memref<f32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the accumulator must be f32 or of the operands' type}}
    rt.kernel matmul(%a, %b, %acc, %w) -> (%acc) ints [0, 0, 5] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xf16>, memref<f32>) -> memref<4x4xf16>
  }
  rt.step [] microbatches []
}

// -----

// An epilogue reads a bias.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': expects 3 inputs, 1 outputs, 3 ints and 0 floats; has 2, 1, 3 and 0}}
    rt.kernel matmul(%a, %b) -> (%c) ints [0, 0, 1] : (memref<4x8xf32>, memref<8x4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Only an epilogue with an activation keeps the activation's input.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': only an epilogue with an activation writes a pre-activation, and only a gradient epilogue a bias gradient (a second output)}}
    rt.kernel matmul(%a, %b, %bias) -> (%c, %pre) ints [0, 0, 1] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
  }
  rt.step [] microbatches []
}

// -----

// The bias has the result's last dimension.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the bias must be [4] (the result's last dimension), f32 or of the result's type}}
    rt.kernel matmul(%a, %b, %wide) -> (%c) ints [0, 0, 1] : (memref<4x8xf32>, memref<8x4xf32>, memref<8xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// A bias is f32 or of the result's type.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the bias must be [4] (the result's last dimension), f32 or of the result's type}}
    rt.kernel matmul(%a, %b, %half) -> (%c) ints [0, 0, 3] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf16>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// The pre-activation has the result's shape and type.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the pre-activation must have the result's shape [4, 4] and element type}}
    rt.kernel matmul(%a, %b, %bias) -> (%c, %halfpre) ints [0, 0, 2] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> (memref<4x4xf32>, memref<4x4xf16>)
  }
  rt.step [] microbatches []
}

// -----

// The pre-activation is not the result.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the pre-activation must be a buffer of its own}}
    rt.kernel matmul(%a, %b, %bias) -> (%c, %c) ints [0, 0, 3] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
  }
  rt.step [] microbatches []
}

// -----

// The gradient epilogue reads the activation's input (a third input).
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': expects 3 inputs, 1 outputs, 3 ints and 0 floats; has 2, 1, 3 and 0}}
    rt.kernel matmul(%a, %b) -> (%c) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// The activation's input has the result's shape and type.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the activation's input must have the result's shape [4, 4] and element type}}
    rt.kernel matmul(%a, %b, %halfpre) -> (%c) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf16>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// The result does not overwrite the activation's input.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul' cannot write an output in place of an input}}
    rt.kernel matmul(%a, %b, %c) -> (%c) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// The bias gradient has the result's last dimension.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the bias gradient must be [4] (the result's last dimension), f32 or of the result's type}}
    rt.kernel matmul(%a, %b, %pre) -> (%c, %wide) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<8xf32>)
  }
  rt.step [] microbatches []
}

// -----

// A bias gradient is f32 or of the result's type.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the bias gradient must be [4] (the result's last dimension), f32 or of the result's type}}
    rt.kernel matmul(%a, %b, %pre) -> (%c, %half) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<4xf16>)
  }
  rt.step [] microbatches []
}

// -----

// The bias gradient is not the result.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  %pre = rt.buffer 320 : memref<4x4xf32>
  %bias = rt.buffer 384 : memref<4xf32>
  %wide = rt.buffer 448 : memref<8xf32>
  %half = rt.buffer 512 : memref<4xf16>
  %halfpre = rt.buffer 576 : memref<4x4xf16>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': the bias gradient must be a buffer of its own}}
    rt.kernel matmul(%a, %b, %pre) -> (%c, %c) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
  }
  rt.step [] microbatches []
}

// -----

// Flags hold 0 or 1.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %c = rt.buffer 256 : memref<4x4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'matmul': flag transpose_a is 956301312; flags are 0 or 1}}
    rt.kernel matmul(%a, %b) -> (%c) ints [956301312, 0] : (memref<4x8xf32>, memref<8x4xf32>) -> memref<4x4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Enums: an activation the runtime knows.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  %y = rt.buffer 64 : memref<4xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'activation': unknown activation 7 (0 to 4)}}
    rt.kernel activation(%x) -> (%y) ints [7] : (memref<4xf32>) -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// Enums: an attention mask the runtime knows.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %q = rt.buffer 0 : memref<2x4x8xf32>
  %o = rt.buffer 512 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'attention': unknown mask 5 (0 to 2)}}
    rt.kernel attention(%q, %q, %q) -> (%o) ints [2, 2, 5, 0, 0] floats [0.5] : (memref<2x4x8xf32>, memref<2x4x8xf32>, memref<2x4x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// Float attributes in their range.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<2x8xf32>
  %g = rt.buffer 64 : memref<8xf32>
  %y = rt.buffer 128 : memref<2x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'rms_norm': epsilon must be positive}}
    rt.kernel rms_norm(%x, %g) -> (%y) floats [0.0] : (memref<2x8xf32>, memref<8xf32>) -> memref<2x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// With the module's rt.plan, what depends on it: an embedding table holds
// no more rows than the vocabulary.
rt.plan mesh ["dp"] = [1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %ids = rt.buffer 0 : memref<2x4xi32>
  %table = rt.buffer 64 : memref<32x8xf32>
  %x = rt.buffer 1088 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'embedding': the table has more rows than the vocabulary}}
    rt.kernel embedding(%ids, %table) -> (%x) : (memref<2x4xi32>, memref<32x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// ... and a vocab-parallel piece names one of the plan's groups.
rt.plan mesh ["dp", "tp"] = [1, 2] seq 4 vocab 16 batch 2 microbatches 1 groups [["tp"]]
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %ids = rt.buffer 0 : memref<2x4xi32>
  %table = rt.buffer 64 : memref<8x8xf32>
  %x = rt.buffer 1088 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'embedding': group 1 is not one of the 1 communicator groups}}
    rt.kernel embedding(%ids, %table) -> (%x) ints [1] : (memref<2x4xi32>, memref<8x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [] microbatches []
}

// -----

// Layer spans: two bounds per name, in order, apart, inside the body.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.func' op has 2 layers but 2 span bounds (two per layer)}}
  rt.func @f args() kinds [] results() names [] layers ["a", "b"] at [0, 1] {
    rt.kernel fill() -> (%x) floats [0.0] : () -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.func' op layer span [1, 3) must follow the one before it and lie in the body's 2 kernels}}
  rt.func @f args() kinds [] results() names [] layers ["a", "b"] at [0, 2, 1, 3] {
    rt.kernel fill() -> (%x) floats [0.0] : () -> memref<4xf32>
    rt.kernel fill() -> (%x) floats [1.0] : () -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4xf32>
  // expected-error@+1 {{'rt.func' op layer span [1, 1) must follow the one before it and lie in the body's 1 kernels}}
  rt.func @f args() kinds [] results() names [] layers ["a"] at [1, 1] {
    rt.kernel fill() -> (%x) floats [0.0] : () -> memref<4xf32>
  }
  rt.step [] microbatches []
}

// -----

// A dropout on a piece of the sequence (its fifth int names the group) runs
// on a [batch, sequence, ...] value.
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<4x8xf32>
  %y = rt.buffer 128 : memref<4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'dropout': a piece of the sequence needs a [batch, sequence, ...] value of rank 3 or more, got rank 2}}
    rt.kernel dropout(%x) -> (%y) ints [0, 0, -1, 1, 0] floats [0.1] : (memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.step [] microbatches []
}

// -----

rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<2x4x8xf32>
  %y = rt.buffer 256 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    // expected-error@+1 {{'rt.kernel' op kernel 'dropout': a piece of one of 0 microbatches}}
    rt.kernel dropout(%x) -> (%y) ints [0, 0, -1, 0, 0] floats [0.1] : (memref<2x4x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [] microbatches []
}
