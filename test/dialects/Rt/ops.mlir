// RUN: triad-opt %s | triad-opt | FileCheck %s
// RUN: triad-opt %s --mlir-print-op-generic | triad-opt | FileCheck %s

// Every rt op round-trips through its custom form.
// CHECK: rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
// CHECK-LABEL: rt.program @rank0 pipeline_rank 0 arena 4096 {
// CHECK: %[[W:.*]] = rt.buffer 0 : memref<16x8xf32>
// CHECK: %[[ACC:.*]] = rt.buffer 512 : memref<16x8xf32>
// CHECK: %[[T:.*]] = rt.buffer 1024 : memref<2x4xi32>
// CHECK: %[[L:.*]] = rt.buffer 1088 : memref<2x4xi32>
// CHECK: %[[N:.*]] = rt.buffer 1152 : memref<f32>
// CHECK: %[[X:.*]] = rt.buffer 1216 : memref<2x4x8xf32>
// CHECK: %[[XV:.*]] = rt.buffer 1216 : memref<8x8xf32>
// CHECK: rt.persistent "w" parameter %[[W]] global [16, 8] offsets [0, 0] init <normal, std = 2.000000e-02> : memref<16x8xf32>
// CHECK: rt.persistent "grad.w" accumulator %[[ACC]] global [16, 8] offsets [0, 0] init <zeros> : memref<16x8xf32>
// CHECK: rt.persistent "p" parameter %{{.*}} global [15, 8] padded [16, 8] offsets [0, 0] init <zeros> : memref<16x8xf32>
// CHECK: rt.func @begin_step args() kinds [] results() names [] {
// CHECK-NEXT: rt.kernel fill() -> (%[[ACC]]) floats [0.000000e+00] : () -> memref<16x8xf32>
// CHECK: rt.func @microbatch_step args(%[[T]], %[[L]] : memref<2x4xi32>, memref<2x4xi32>) kinds ["tokens", "labels"] results(%[[N]] : memref<f32>) names ["tokens"] layers ["embedding 0", "head 0 backward"] at [1, 2, 2, 4] {
// CHECK-NEXT: rt.kernel count_valid(%[[L]]) -> (%[[N]]) ints [-100] : (memref<2x4xi32>) -> memref<f32>
// CHECK-NEXT: rt.kernel embedding(%[[T]], %[[W]]) -> (%[[X]]) : (memref<2x4xi32>, memref<16x8xf32>) -> memref<2x4x8xf32>
// CHECK-NEXT: rt.kernel accumulate(%[[ACC]], %[[W]], %[[N]]) -> (%[[ACC]])
// CHECK-NEXT: rt.kernel adamw(%[[W]], %[[ACC]], %[[ACC]], %[[ACC]], %[[N]], %[[N]], %[[N]]) -> (%[[W]], %[[ACC]], %[[ACC]]) floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01]
// AdamW reads a 16-bit gradient as it is.
// CHECK-NEXT: rt.kernel adamw(%[[W]], %{{.*}}, %[[ACC]], %[[ACC]], %[[N]], %[[N]], %[[N]]) {{.*}} : (memref<16x8xf32>, memref<16x8xbf16>,
// Over two tensors, each parameter also rounded to bf16; the gradient
// norm's sum of squares over both.
// CHECK-NEXT: rt.kernel adamw(%[[W]], %[[ACC]], %[[ACC]], %[[ACC]], %[[P:[^,]*]], %{{.*}}) -> (%[[W]], %[[ACC]], %[[ACC]], %[[G16:[^,]*]], %[[P]], {{.*}}) floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01, 0.000000e+00]
// CHECK-NEXT: rt.kernel sum_squares(%[[ACC]], %[[G16]]) -> (%[[N]]) : (memref<16x8xf32>, memref<16x8xbf16>) -> memref<f32>
// CHECK-NEXT: rt.kernel copy(%[[XV]]) -> (%[[X]])
// CHECK-NEXT: rt.kernel send(%[[X]]) -> () ints [1, 7] : (memref<2x4x8xf32>) -> ()
// CHECK-NEXT: rt.kernel recv() -> (%[[X]]) ints [1, 8] : () -> memref<2x4x8xf32>
// CHECK: rt.step [@begin_step, @microbatch_step, @microbatch_step] microbatches [0, 0, 0]
rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %w = rt.buffer 0 : memref<16x8xf32>
  %acc = rt.buffer 512 : memref<16x8xf32>
  %t = rt.buffer 1024 : memref<2x4xi32>
  %l = rt.buffer 1088 : memref<2x4xi32>
  %n = rt.buffer 1152 : memref<f32>
  %x = rt.buffer 1216 : memref<2x4x8xf32>
  %xv = rt.buffer 1216 : memref<8x8xf32>
  %g16 = rt.buffer 1536 : memref<16x8xbf16>
  rt.persistent "w" parameter %w global [16, 8] offsets [0, 0] init <normal, std = 0.02> : memref<16x8xf32>
  rt.persistent "grad.w" accumulator %acc global [16, 8] offsets [0, 0] init <zeros> : memref<16x8xf32>
  %p = rt.buffer 2048 : memref<16x8xf32>
  rt.persistent "p" parameter %p global [15, 8] padded [16, 8] offsets [0, 0] init <zeros> : memref<16x8xf32>
  rt.func @begin_step args() kinds [] results() names [] {
    rt.kernel fill() -> (%acc) floats [0.0] : () -> memref<16x8xf32>
  }
  rt.func @microbatch_step args(%t, %l : memref<2x4xi32>, memref<2x4xi32>) kinds ["tokens", "labels"] results(%n : memref<f32>) names ["tokens"] layers ["embedding 0", "head 0 backward"] at [1, 2, 2, 4] {
    rt.kernel count_valid(%l) -> (%n) ints [-100] : (memref<2x4xi32>) -> memref<f32>
    rt.kernel embedding(%t, %w) -> (%x) : (memref<2x4xi32>, memref<16x8xf32>) -> memref<2x4x8xf32>
    rt.kernel accumulate(%acc, %w, %n) -> (%acc) : (memref<16x8xf32>, memref<16x8xf32>, memref<f32>) -> memref<16x8xf32>
    rt.kernel adamw(%w, %acc, %acc, %acc, %n, %n, %n) -> (%w, %acc, %acc) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>)
    rt.kernel adamw(%w, %g16, %acc, %acc, %n, %n, %n) -> (%w, %acc, %acc) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<16x8xf32>, memref<16x8xbf16>, memref<16x8xf32>, memref<16x8xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>)
    rt.kernel adamw(%w, %acc, %acc, %acc, %p, %acc, %acc, %acc, %n, %n, %n) -> (%w, %acc, %acc, %g16, %p, %acc, %acc, %g16) floats [0.9, 0.95, 1.0e-8, 0.1, 0.0] : (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xbf16>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xbf16>)
    rt.kernel sum_squares(%acc, %g16) -> (%n) : (memref<16x8xf32>, memref<16x8xbf16>) -> memref<f32>
    rt.kernel copy(%xv) -> (%x) : (memref<8x8xf32>) -> memref<2x4x8xf32>
    rt.kernel send(%x) -> () ints [1, 7] : (memref<2x4x8xf32>) -> ()
    rt.kernel recv() -> (%x) ints [1, 8] : () -> memref<2x4x8xf32>
  }
  rt.step [@begin_step, @microbatch_step, @microbatch_step] microbatches [0, 0, 0]
}

// A pipeline stage's values kept between its calls have a copy per
// microbatch live in them at once; each call of the step picks its slot,
// and a buffer with fewer copies serves it with copy slot mod its slots.
// CHECK-LABEL: rt.program @rank1 pipeline_rank 0 arena 8192 {
// CHECK: %[[K:.*]] = rt.buffer 0 slots 4 stride 1024 : memref<2x4x8xf32>
// CHECK: rt.buffer 6144 slots 1 stride 256 : memref<2x4x8xf32>
// CHECK: rt.func @forward_s0 args() kinds [] results() names [] {
// CHECK-NEXT: rt.kernel fill() -> (%[[K]])
// CHECK: rt.step [@forward_s0, @backward_s0, @forward_s0] microbatches [0, 0, 0] slots [0, 0, 3]
rt.program @rank1 pipeline_rank 0 arena 8192 {
  %kept = rt.buffer 0 slots 4 stride 1024 : memref<2x4x8xf32>
  %tmp = rt.buffer 4096 : memref<2x4x8xf32>
  %once = rt.buffer 6144 slots 1 stride 256 : memref<2x4x8xf32>
  rt.func @forward_s0 args() kinds [] results() names [] {
    rt.kernel fill() -> (%kept) floats [1.0] : () -> memref<2x4x8xf32>
    rt.kernel fill() -> (%once) floats [1.0] : () -> memref<2x4x8xf32>
  }
  rt.func @backward_s0 args() kinds [] results() names [] {
    rt.kernel scale(%kept) -> (%tmp) floats [2.0] : (memref<2x4x8xf32>) -> memref<2x4x8xf32>
  }
  rt.step [@forward_s0, @backward_s0, @forward_s0] microbatches [0, 0, 0] slots [0, 0, 3]
}

// A product with a fused epilogue: its bias is a third input, its epilogue
// code a third int, and the pre-activation an activation's gradient reads
// a second output.
// CHECK-LABEL: rt.program @rank2 pipeline_rank 0 arena 4096 {
// CHECK: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%{{.*}}, %{{.*}}) ints [0, 0, 2] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
// CHECK-NEXT: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%{{.*}}) ints [0, 0, 1] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4xf32>) -> memref<4x4xbf16>
// The GELU's gradient epilogue: the activation's input a third input, the
// bias gradient (optional) a second output.
// CHECK-NEXT: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%{{.*}}, %{{.*}}) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<4xf32>)
// CHECK-NEXT: rt.kernel matmul(%{{.*}}, %{{.*}}, %{{.*}}) -> (%{{.*}}) ints [0, 0, 4] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xbf16>) -> memref<4x4xbf16>
rt.program @rank2 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<8x4xf32>
  %bias = rt.buffer 256 : memref<4xf32>
  %c = rt.buffer 320 : memref<4x4xf32>
  %pre = rt.buffer 384 : memref<4x4xf32>
  %a16 = rt.buffer 448 : memref<4x8xbf16>
  %b16 = rt.buffer 512 : memref<8x4xbf16>
  %c16 = rt.buffer 576 : memref<4x4xbf16>
  %pre16 = rt.buffer 640 : memref<4x4xbf16>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel matmul(%a, %b, %bias) -> (%c, %pre) ints [0, 0, 2] : (memref<4x8xf32>, memref<8x4xf32>, memref<4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
    rt.kernel matmul(%a16, %b16, %bias) -> (%c16) ints [0, 0, 1] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4xf32>) -> memref<4x4xbf16>
    rt.kernel matmul(%a, %b, %pre) -> (%c, %bias) ints [0, 0, 4] : (memref<4x8xf32>, memref<8x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<4xf32>)
    rt.kernel matmul(%a16, %b16, %pre16) -> (%c16) ints [0, 0, 4] : (memref<4x8xbf16>, memref<8x4xbf16>, memref<4x4xbf16>) -> memref<4x4xbf16>
  }
  rt.step [@f] microbatches [0]
}
