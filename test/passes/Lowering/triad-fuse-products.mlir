// RUN: triad-opt %s --split-input-file --triad-fuse-products | FileCheck %s
// RUN: triad-opt %s --split-input-file '--triad-fuse-products=accumulate=false adds=false' | FileCheck %s --check-prefix=OFF
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 4 --dtype bf16 | triad-opt --triad-train-pipeline | FileCheck %s --check-prefix=MODEL

// The train pipeline runs the pass: in the microbatch step, the layer's
// six weight gradients accumulate in their products (epilogue 5), and the
// two residual adds after the attention's and the MLP's output
// projections are their products' (epilogue 7, after the bias).
// MODEL-LABEL: rt.func @microbatch_step
// MODEL-COUNT-2: ints [0, 0, 7] : (memref<4x16x{{[0-9]+}}xbf16>, memref<{{[0-9]+}}x32xbf16>, memref<32xbf16>, memref<4x16x32xbf16>) -> memref<4x16x32xbf16>
// MODEL-NOT: ints [0, 0, 7]
// MODEL-COUNT-6: ints [1, 0, 5] : ({{.*}}, memref<f32>) -> memref<{{[0-9]+}}x{{[0-9]+}}xf32>
// MODEL-NOT: ints [1, 0, 5]
// MODEL: rt.func @apply_step

// OFF-NOT: ints [1, 0, 5]
// OFF-NOT: ints [0, 0, 6]
// OFF-NOT: ints [0, 0, 7]

// -----

// A weight gradient's product that only an accumulate adds to its f32
// accumulator: one matmul with the accumulating epilogue (5) at the
// accumulate's place, reading the accumulator and the weight; the
// product's buffer goes. The layer spans follow the kernels (the layer
// loses the product's kernel).
// CHECK-LABEL: rt.program @accumulated
// CHECK-NOT: rt.buffer 256 :
// CHECK: rt.func @microbatch_step args() kinds [] results() names [] layers ["block 0", "block 0 backward"] at [0, 1, 1, 3] {
// CHECK-NEXT: rt.kernel fill() -> (%[[W:.*]]) floats
// CHECK-NEXT: rt.kernel matmul(%[[A:.*]], %[[B:.*]], %[[ACC:.*]], %[[W]]) -> (%[[ACC]]) ints [1, 0, 5] : (memref<4x8xbf16>, memref<4x2xbf16>, memref<8x2xf32>, memref<f32>) -> memref<8x2xf32>
// CHECK-NEXT: rt.kernel add
// CHECK-NEXT: }
rt.program @accumulated pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 64 : memref<4x2xbf16>
  %acc = rt.buffer 128 : memref<8x2xf32>
  %w = rt.buffer 192 : memref<f32>
  %g = rt.buffer 256 : memref<8x2xbf16>
  %x = rt.buffer 320 : memref<4x2xbf16>
  rt.func @microbatch_step args() kinds [] results() names [] layers ["block 0", "block 0 backward"] at [0, 1, 1, 4] {
    rt.kernel fill() -> (%w) floats [2.0] : () -> memref<f32>
    rt.kernel matmul(%a, %b) -> (%g) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel accumulate(%acc, %g, %w) -> (%acc) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
    rt.kernel add(%b, %b) -> (%x) : (memref<4x2xbf16>, memref<4x2xbf16>) -> memref<4x2xbf16>
  }
  rt.step [@microbatch_step] microbatches [0]
}

// -----

// Not fused, each for one reason (every product its own buffer, used by
// its function alone): a product another kernel reads; an operand written
// between the product and its accumulate; a product with an activation
// epilogue; a product whose bytes a later kernel reads through another
// buffer (a view of them); a product whose bytes another function reads
// through a view before it writes them; an accumulator that shares bytes
// with an operand.
// CHECK-LABEL: rt.program @kept_products
// CHECK: rt.func @read
// CHECK-NEXT: rt.kernel fill
// CHECK-NEXT: rt.kernel matmul(%{{[^,]*}}, %{{[^,)]*}}) -> (%{{[^)]*}}) ints [1, 0] :
// CHECK-NEXT: rt.kernel accumulate
// CHECK: rt.func @overwritten
// CHECK-NEXT: rt.kernel matmul(%{{[^,]*}}, %{{[^,)]*}}) -> (%{{[^)]*}}) ints [1, 0] :
// CHECK-NEXT: rt.kernel fill
// CHECK-NEXT: rt.kernel accumulate
// CHECK: rt.func @epilogue
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0, 2] :
// CHECK-NEXT: rt.kernel accumulate
// CHECK: rt.func @viewed
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [1, 0] :
// CHECK-NEXT: rt.kernel accumulate
// CHECK: rt.func @elsewhere
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [1, 0] :
// CHECK-NEXT: rt.kernel accumulate
// CHECK: rt.func @later
// CHECK-NEXT: rt.kernel scale
// CHECK: rt.func @aliased
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [1, 0] :
// CHECK-NEXT: rt.kernel accumulate
// CHECK-NOT: ints [1, 0, 5]
rt.program @kept_products pipeline_rank 0 arena 8192 {
  %a = rt.buffer 0 : memref<4x8xbf16>
  %b = rt.buffer 64 : memref<4x2xbf16>
  %acc = rt.buffer 128 : memref<8x2xf32>
  %w = rt.buffer 192 : memref<f32>
  %g1 = rt.buffer 256 : memref<8x2xbf16>
  %s = rt.buffer 320 : memref<8x2xbf16>
  %g2 = rt.buffer 384 : memref<8x2xbf16>
  %x = rt.buffer 512 : memref<2x4xbf16>
  %y = rt.buffer 576 : memref<4x8xbf16>
  %bias = rt.buffer 640 : memref<8xbf16>
  %z = rt.buffer 704 : memref<2x8xbf16>
  %pre = rt.buffer 896 : memref<2x8xbf16>
  %acc2 = rt.buffer 768 : memref<2x8xf32>
  %g4 = rt.buffer 1024 : memref<8x2xbf16>
  %v4 = rt.buffer 1024 : memref<16xbf16>
  %s4 = rt.buffer 1088 : memref<16xbf16>
  %g5 = rt.buffer 1152 : memref<8x2xbf16>
  %v5 = rt.buffer 1152 : memref<16xbf16>
  %s5 = rt.buffer 1216 : memref<16xbf16>
  %g6 = rt.buffer 1280 : memref<8x2xbf16>
  %acc6 = rt.buffer 2048 : memref<8x2xf32>
  %a6 = rt.buffer 2048 : memref<4x8xbf16>
  rt.func @read args() kinds [] results() names [] {
    rt.kernel fill() -> (%w) floats [2.0] : () -> memref<f32>
    rt.kernel matmul(%a, %b) -> (%g1) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel accumulate(%acc, %g1, %w) -> (%acc) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
    rt.kernel add(%g1, %g1) -> (%s) : (memref<8x2xbf16>, memref<8x2xbf16>) -> memref<8x2xbf16>
  }
  rt.func @overwritten args() kinds [] results() names [] {
    rt.kernel matmul(%a, %b) -> (%g2) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel fill() -> (%b) floats [0.0] : () -> memref<4x2xbf16>
    rt.kernel accumulate(%acc, %g2, %w) -> (%acc) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
  }
  rt.func @epilogue args() kinds [] results() names [] {
    rt.kernel matmul(%x, %y, %bias) -> (%z, %pre) ints [0, 0, 2] : (memref<2x4xbf16>, memref<4x8xbf16>, memref<8xbf16>) -> (memref<2x8xbf16>, memref<2x8xbf16>)
    rt.kernel accumulate(%acc2, %z, %w) -> (%acc2) : (memref<2x8xf32>, memref<2x8xbf16>, memref<f32>) -> memref<2x8xf32>
  }
  rt.func @viewed args() kinds [] results() names [] {
    rt.kernel matmul(%a, %b) -> (%g4) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel accumulate(%acc, %g4, %w) -> (%acc) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
    rt.kernel scale(%v4) -> (%s4) floats [2.0] : (memref<16xbf16>) -> memref<16xbf16>
  }
  rt.func @elsewhere args() kinds [] results() names [] {
    rt.kernel matmul(%a, %b) -> (%g5) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel accumulate(%acc, %g5, %w) -> (%acc) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
  }
  rt.func @later args() kinds [] results() names [] {
    rt.kernel scale(%v5) -> (%s5) floats [2.0] : (memref<16xbf16>) -> memref<16xbf16>
  }
  rt.func @aliased args() kinds [] results() names [] {
    rt.kernel matmul(%a6, %b) -> (%g6) ints [1, 0] : (memref<4x8xbf16>, memref<4x2xbf16>) -> memref<8x2xbf16>
    rt.kernel accumulate(%acc6, %g6, %w) -> (%acc6) : (memref<8x2xf32>, memref<8x2xbf16>, memref<f32>) -> memref<8x2xf32>
  }
  rt.step [@read, @overwritten, @epilogue, @viewed, @elsewhere, @later, @aliased] microbatches [0, 0, 0, 0, 0, 0, 0]
}

// -----

// A product, with its bias or none, that only an add adds to a tensor of
// its shape: one matmul with an adding epilogue (7 after the bias, 6
// without) at the add's place, reading that tensor; the sum may take the
// addend's very bytes (cuBLASLt reads C where it writes D). Of an add of
// two products, the one that runs last takes the other as its addend.
// CHECK-LABEL: rt.program @added
// CHECK: rt.func @forward args() kinds [] results() names [] layers ["block 0"] at [0, 2] {
// CHECK-NEXT: rt.kernel matmul(%[[X:.*]], %[[WO:.*]], %[[BO:.*]], %[[RES:.*]]) -> (%[[H:.*]]) ints [0, 0, 7] : (memref<4x8xf32>, memref<8x8xf32>, memref<8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
// CHECK-NEXT: rt.kernel matmul(%[[X]], %[[WO]], %[[H]]) -> (%[[H2:.*]]) ints [0, 0, 6] :
// CHECK-NEXT: }
// CHECK: rt.func @both
// CHECK-NEXT: rt.kernel matmul(%{{[^,]*}}, %{{[^,]*}}) -> (%[[P:[0-9]+]]) ints [0, 1] :
// CHECK-NEXT: rt.kernel matmul(%{{[^,]*}}, %{{[^,]*}}, %[[P]]) -> (%{{[0-9]+}}) ints [0, 1, 6] :
// CHECK-NEXT: }
rt.program @added pipeline_rank 0 arena 8192 {
  %x = rt.buffer 0 : memref<4x8xf32>
  %wo = rt.buffer 128 : memref<8x8xf32>
  %bo = rt.buffer 384 : memref<8xf32>
  %res = rt.buffer 512 : memref<4x8xf32>
  %t = rt.buffer 640 : memref<4x8xf32>
  %h = rt.buffer 768 : memref<4x8xf32>
  %t2 = rt.buffer 896 : memref<4x8xf32>
  %h2 = rt.buffer 768 : memref<4x8xf32>
  %dy = rt.buffer 1024 : memref<4x8xf32>
  %p1 = rt.buffer 1152 : memref<4x8xf32>
  %p2 = rt.buffer 1280 : memref<4x8xf32>
  %sum = rt.buffer 1408 : memref<4x8xf32>
  rt.func @forward args() kinds [] results() names [] layers ["block 0"] at [0, 4] {
    rt.kernel matmul(%x, %wo, %bo) -> (%t) ints [0, 0, 1] : (memref<4x8xf32>, memref<8x8xf32>, memref<8xf32>) -> memref<4x8xf32>
    rt.kernel add(%res, %t) -> (%h) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
    rt.kernel matmul(%x, %wo) -> (%t2) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%t2, %h) -> (%h2) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @both args() kinds [] results() names [] {
    rt.kernel matmul(%dy, %wo) -> (%p1) ints [0, 1] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel matmul(%x, %wo) -> (%p2) ints [0, 1] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%p1, %p2) -> (%sum) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.step [@forward, @both] microbatches [0, 0]
}

// -----

// Not fused: a sum over the product's operand's bytes (the memory plan
// reused them: the product would read what it writes); a sum that partly
// overlaps the addend; a broadcast add (a bias's, not an addend's shape);
// an operand written between the product and the add; the product's
// bytes read later through another buffer, in its function or first thing
// in another; an addend that is the product's operand too.
// Where the later product cannot take the add (its sum lies over the later
// product's operand), the earlier one does.
// CHECK-LABEL: rt.program @kept_adds
// CHECK: rt.func @reused
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @partly
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @broadcast
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @earlier
// CHECK-NEXT: rt.kernel matmul(%[[B4:[0-9]+]], %[[W4:[0-9]+]]) -> (%[[Q4:[0-9]+]]) ints [0, 0] :
// CHECK-NEXT: rt.kernel matmul(%{{[0-9]+}}, %[[W4]], %[[Q4]]) -> (%{{[0-9]+}}) ints [0, 0, 6] :
// CHECK-NEXT: }
// CHECK: rt.func @overwritten
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel fill
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @viewed
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @elsewhere
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @operand
// CHECK-NEXT: rt.kernel matmul({{.*}}) ints [0, 0] :
// CHECK-NEXT: rt.kernel add
rt.program @kept_adds pipeline_rank 0 arena 8192 {
  %x = rt.buffer 0 : memref<4x8xf32>
  %w = rt.buffer 128 : memref<8x8xf32>
  %s = rt.buffer 384 : memref<4x8xf32>
  %t1 = rt.buffer 512 : memref<4x8xf32>
  %u1 = rt.buffer 0 : memref<4x8xf32>
  %x2 = rt.buffer 1024 : memref<4x8xf32>
  %t2 = rt.buffer 1152 : memref<4x8xf32>
  %s2 = rt.buffer 1280 : memref<4x8xf32>
  %u2 = rt.buffer 1344 : memref<4x8xf32>
  %x3 = rt.buffer 2048 : memref<4x8xf32>
  %t3 = rt.buffer 2176 : memref<4x8xf32>
  %v3 = rt.buffer 2304 : memref<8xf32>
  %u3 = rt.buffer 2432 : memref<4x8xf32>
  %a4 = rt.buffer 3072 : memref<4x8xf32>
  %b4 = rt.buffer 3200 : memref<4x8xf32>
  %p4 = rt.buffer 3328 : memref<4x8xf32>
  %q4 = rt.buffer 3456 : memref<4x8xf32>
  %u4 = rt.buffer 3200 : memref<4x8xf32>
  %x5 = rt.buffer 4096 : memref<4x8xf32>
  %t5 = rt.buffer 4224 : memref<4x8xf32>
  %u5 = rt.buffer 4352 : memref<4x8xf32>
  %t6 = rt.buffer 4608 : memref<4x8xf32>
  %v6 = rt.buffer 4608 : memref<32xf32>
  %o6 = rt.buffer 4736 : memref<32xf32>
  %u6 = rt.buffer 4864 : memref<4x8xf32>
  %t7 = rt.buffer 5120 : memref<4x8xf32>
  %v7 = rt.buffer 5120 : memref<32xf32>
  %o7 = rt.buffer 5248 : memref<32xf32>
  %u7 = rt.buffer 5376 : memref<4x8xf32>
  %sq = rt.buffer 5632 : memref<8x8xf32>
  %wq = rt.buffer 5888 : memref<8x8xf32>
  %t8 = rt.buffer 6144 : memref<8x8xf32>
  %u8 = rt.buffer 6400 : memref<8x8xf32>
  rt.func @reused args() kinds [] results() names [] {
    rt.kernel matmul(%x, %w) -> (%t1) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%s, %t1) -> (%u1) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @partly args() kinds [] results() names [] {
    rt.kernel matmul(%x2, %w) -> (%t2) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%s2, %t2) -> (%u2) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @broadcast args() kinds [] results() names [] {
    rt.kernel matmul(%x3, %w) -> (%t3) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%t3, %v3) -> (%u3) : (memref<4x8xf32>, memref<8xf32>) -> memref<4x8xf32>
  }
  rt.func @earlier args() kinds [] results() names [] {
    rt.kernel matmul(%a4, %w) -> (%p4) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel matmul(%b4, %w) -> (%q4) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%p4, %q4) -> (%u4) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @overwritten args() kinds [] results() names [] {
    rt.kernel matmul(%x5, %w) -> (%t5) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel fill() -> (%x5) floats [0.0] : () -> memref<4x8xf32>
    rt.kernel add(%s, %t5) -> (%u5) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @viewed args() kinds [] results() names [] {
    rt.kernel matmul(%x, %w) -> (%t6) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%s, %t6) -> (%u6) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
    rt.kernel scale(%v6) -> (%o6) floats [2.0] : (memref<32xf32>) -> memref<32xf32>
  }
  rt.func @elsewhere args() kinds [] results() names [] {
    rt.kernel matmul(%x, %w) -> (%t7) ints [0, 0] : (memref<4x8xf32>, memref<8x8xf32>) -> memref<4x8xf32>
    rt.kernel add(%s, %t7) -> (%u7) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.func @later args() kinds [] results() names [] {
    rt.kernel scale(%v7) -> (%o7) floats [2.0] : (memref<32xf32>) -> memref<32xf32>
  }
  rt.func @operand args() kinds [] results() names [] {
    rt.kernel matmul(%sq, %wq) -> (%t8) ints [0, 0] : (memref<8x8xf32>, memref<8x8xf32>) -> memref<8x8xf32>
    rt.kernel add(%sq, %t8) -> (%u8) : (memref<8x8xf32>, memref<8x8xf32>) -> memref<8x8xf32>
  }
  rt.step [@reused, @partly, @broadcast, @earlier, @overwritten, @viewed, @elsewhere, @later, @operand] microbatches [0, 0, 0, 0, 0, 0, 0, 0, 0]
}
