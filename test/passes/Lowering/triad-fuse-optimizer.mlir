// RUN: triad-opt %s --split-input-file --triad-fuse-optimizer | FileCheck %s
// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt --triad-fuse-optimizer | FileCheck %s --check-prefix=MODEL
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 4 --dtype bf16 | triad-opt --triad-train-pipeline | FileCheck %s --check-prefix=BF16

// The train pipeline runs the pass: a bf16 model's optimizer step is one
// sum of squares and one adamw over its 20 tensors (80 + 3 inputs), each
// writing its bf16 parameter; no cast is left.
// BF16-LABEL: rt.func @apply_step
// BF16-NOT: rt.kernel cast
// BF16: rt.kernel sum_squares(%{{[^,]*(, %[^,)]*){19}[)]}} -> (%{{[^)]*}}) : (memref<256x32xf32>,
// BF16-NOT: rt.kernel cast
// BF16: rt.kernel adamw(%{{[^,]*(, %[^,)]*){82}[)]}} -> (%{{[^,]*(, %[^,)]*){79}[)]}} floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01, {{.*}} -> (memref<256x32xf32>, memref<256x32xf32>, memref<256x32xf32>, memref<256x32xbf16>,
// BF16-NOT: rt.kernel adamw
// BF16-NOT: rt.kernel cast
// BF16: rt.func @eval_step

// The two-parameter model's optimizer step: one sum of squares over both
// gradients, one adamw over both tensors with their own weight decays
// (0.1 for the matrix, 0 for the vector).
// MODEL-LABEL: rt.func @apply_step
// MODEL: rt.kernel lr_schedule
// MODEL-NEXT: rt.kernel sum_squares(%[[G0:.*]], %[[G1:.*]]) -> (%{{.*}}) : (memref<16x8xf32>, memref<8xf32>) -> memref<f32>
// MODEL-NEXT: rt.kernel fill
// MODEL-NEXT: rt.kernel clip_coefficient
// MODEL-NEXT: rt.kernel copy
// MODEL-NEXT: rt.kernel adamw(%{{[^,]*}}, %[[G0]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[G1]], {{.*}}) floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01, 0.000000e+00] : (memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<f32>, memref<f32>, memref<f32>)
// MODEL-NEXT: }

// -----

// Sums of squares totalled by a chain of adds: one kernel over every
// tensor, in the chain's order, where the last add was; the partial sums'
// buffers go. The limit (f16's overflow check) is kept.
// CHECK-LABEL: rt.program @chain
// CHECK-NOT: rt.buffer 256 :
// CHECK-NOT: rt.buffer 320 :
// CHECK-NOT: rt.buffer 384 :
// CHECK: rt.func @apply_step
// CHECK-NEXT: rt.kernel fill() -> (%[[ONE:.*]])
// CHECK-NEXT: rt.kernel sum_squares(%[[A:.*]], %[[B:.*]], %[[C:.*]]) -> (%[[T:.*]]) floats [1.000000e+03] : (memref<4x4xf32>, memref<4xbf16>, memref<4xf32>) -> memref<f32>
// CHECK-NEXT: rt.kernel clip_coefficient(%[[T]])
// CHECK-NEXT: }
rt.program @chain pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x4xf32>
  %b = rt.buffer 64 : memref<4xbf16>
  %c = rt.buffer 128 : memref<4xf32>
  %one = rt.buffer 192 : memref<f32>
  %sa = rt.buffer 256 : memref<f32>
  %sb = rt.buffer 320 : memref<f32>
  %ab = rt.buffer 384 : memref<f32>
  %sc = rt.buffer 448 : memref<f32>
  %t = rt.buffer 512 : memref<f32>
  %coef = rt.buffer 576 : memref<f32>
  %norm = rt.buffer 640 : memref<f32>
  rt.func @apply_step args() kinds [] results(%norm : memref<f32>) names ["grad_norm"] {
    rt.kernel sum_squares(%a) -> (%sa) floats [1000.0] : (memref<4x4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%sb) floats [1000.0] : (memref<4xbf16>) -> memref<f32>
    rt.kernel add(%sa, %sb) -> (%ab) : (memref<f32>, memref<f32>) -> memref<f32>
    rt.kernel fill() -> (%one) floats [1.0] : () -> memref<f32>
    rt.kernel sum_squares(%c) -> (%sc) floats [1000.0] : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%ab, %sc) -> (%t) : (memref<f32>, memref<f32>) -> memref<f32>
    rt.kernel clip_coefficient(%t) -> (%coef, %norm) floats [1.0] : (memref<f32>) -> (memref<f32>, memref<f32>)
  }
  rt.step [@apply_step] microbatches [0]
}

// -----

// Not fused: sums with different limits; a partial sum another kernel
// reads (or a function returns); a tensor written between its sum and the
// add that would read it; a partial sum whose bytes a kernel reads
// through another buffer (a view of them), which the fusion would leave
// unwritten.
// CHECK-LABEL: rt.program @kept
// CHECK: rt.func @limits
// CHECK-NEXT: rt.kernel sum_squares(%{{.*}}) -> (%{{.*}}) floats [1.000000e+03]
// CHECK-NEXT: rt.kernel sum_squares(%{{.*}}) -> (%{{.*}}) :
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @shared
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @returned
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @written
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel fill
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @view
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel scale_by
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
// CHECK: rt.func @viewed
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
// CHECK-NEXT: rt.kernel copy
rt.program @kept pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  %b = rt.buffer 64 : memref<4xf32>
  %a2 = rt.buffer 0 : memref<2x2xf32>
  %s0 = rt.buffer 128 : memref<f32>
  %s1 = rt.buffer 192 : memref<f32>
  %t = rt.buffer 256 : memref<f32>
  %u = rt.buffer 320 : memref<f32>
  %r0 = rt.buffer 384 : memref<f32>
  %r1 = rt.buffer 448 : memref<f32>
  %rt = rt.buffer 512 : memref<f32>
  %w0 = rt.buffer 576 : memref<f32>
  %w1 = rt.buffer 640 : memref<f32>
  %wt = rt.buffer 704 : memref<f32>
  %v0 = rt.buffer 768 : memref<f32>
  %v1 = rt.buffer 832 : memref<f32>
  %vt = rt.buffer 896 : memref<f32>
  %l0 = rt.buffer 960 : memref<f32>
  %l1 = rt.buffer 1024 : memref<f32>
  %lt = rt.buffer 1088 : memref<f32>
  %x0 = rt.buffer 1152 : memref<f32>
  %x0v = rt.buffer 1152 : memref<1xf32>
  %x1 = rt.buffer 1216 : memref<f32>
  %xt = rt.buffer 1280 : memref<f32>
  %xo = rt.buffer 1344 : memref<1xf32>
  rt.func @limits args() kinds [] results() names [] {
    rt.kernel sum_squares(%a) -> (%l0) floats [1000.0] : (memref<4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%l1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%l0, %l1) -> (%lt) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  rt.func @shared args() kinds [] results() names [] {
    rt.kernel sum_squares(%a) -> (%s0) : (memref<4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%s1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%s0, %s1) -> (%t) : (memref<f32>, memref<f32>) -> memref<f32>
    rt.kernel add(%s0, %t) -> (%u) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  rt.func @returned args() kinds [] results(%r0 : memref<f32>) names ["first"] {
    rt.kernel sum_squares(%a) -> (%r0) : (memref<4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%r1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%r0, %r1) -> (%rt) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  rt.func @written args() kinds [] results() names [] {
    rt.kernel sum_squares(%a) -> (%w0) : (memref<4xf32>) -> memref<f32>
    rt.kernel fill() -> (%a) floats [0.0] : () -> memref<4xf32>
    rt.kernel sum_squares(%b) -> (%w1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%w0, %w1) -> (%wt) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  // %a2 is another view of %a's bytes.
  rt.func @view args() kinds [] results() names [] {
    rt.kernel sum_squares(%a) -> (%v0) : (memref<4xf32>) -> memref<f32>
    rt.kernel scale_by(%a2, %v0) -> (%a2) : (memref<2x2xf32>, memref<f32>) -> memref<2x2xf32>
    rt.kernel sum_squares(%b) -> (%v1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%v0, %v1) -> (%vt) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  rt.func @viewed args() kinds [] results() names [] {
    rt.kernel sum_squares(%a) -> (%x0) : (memref<4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%x1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%x0, %x1) -> (%xt) : (memref<f32>, memref<f32>) -> memref<f32>
    rt.kernel copy(%x0v) -> (%xo) : (memref<1xf32>) -> memref<1xf32>
  }
  rt.step [@limits, @shared, @returned, @written, @view, @viewed] microbatches [0, 0, 0, 0, 0, 0]
}

// -----

// bf16 parameters: each adamw writes its parameter's rounded copy, and the
// updates run as one kernel with each tensor's weight decay.
// CHECK-LABEL: rt.program @rounded
// CHECK: rt.func @apply_step
// CHECK-NEXT: rt.kernel adamw(%[[P0:[^,]*]], %[[G0:[^,]*]], %[[M0:[^,]*]], %[[V0:[^,]*]], %[[P1:[^,]*]], %[[G1:[^,]*]], %[[M1:[^,]*]], %[[V1:[^,]*]], %[[LR:[^,]*]], %[[S:[^,]*]], %[[C:[^)]*]]) -> (%[[P0]], %[[M0]], %[[V0]], %[[W0:[^,]*]], %[[P1]], %[[M1]], %[[V1]], %[[W1:[^)]*]]) floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01, 0.000000e+00] : (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4xf32>, memref<4xbf16>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xbf16>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xbf16>)
// CHECK-NEXT: }
rt.program @rounded pipeline_rank 0 arena 4096 {
  %p0 = rt.buffer 0 : memref<4x4xf32>
  %g0 = rt.buffer 64 : memref<4x4xf32>
  %m0 = rt.buffer 128 : memref<4x4xf32>
  %v0 = rt.buffer 192 : memref<4x4xf32>
  %w0 = rt.buffer 256 : memref<4x4xbf16>
  %p1 = rt.buffer 320 : memref<4xf32>
  %g1 = rt.buffer 384 : memref<4xbf16>
  %m1 = rt.buffer 448 : memref<4xf32>
  %v1 = rt.buffer 512 : memref<4xf32>
  %w1 = rt.buffer 576 : memref<4xbf16>
  %lr = rt.buffer 640 : memref<f32>
  %s = rt.buffer 704 : memref<f32>
  %c = rt.buffer 768 : memref<f32>
  rt.func @apply_step args() kinds [] results() names [] {
    rt.kernel adamw(%p0, %g0, %m0, %v0, %lr, %s, %c) -> (%p0, %m0, %v0) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>)
    rt.kernel cast(%p0) -> (%w0) : (memref<4x4xf32>) -> memref<4x4xbf16>
    rt.kernel adamw(%p1, %g1, %m1, %v1, %lr, %s, %c) -> (%p1, %m1, %v1) floats [0.9, 0.95, 1.0e-8, 0.0] : (memref<4xf32>, memref<4xbf16>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel cast(%p1) -> (%w1) : (memref<4xf32>) -> memref<4xbf16>
  }
  rt.step [@apply_step] microbatches [0]
}

// -----

// f16 loss scaling: the update goes to temporaries that selects keep or
// drop. It becomes one adamw in place that reads the skip flag (writing
// nothing on a skipped step) and writes the rounded copy; the two tensors'
// updates then run as one kernel. The temporaries' buffers go.
// CHECK-LABEL: rt.program @selected
// CHECK-NOT: rt.buffer 320 :
// CHECK-NOT: rt.buffer 1088 :
// CHECK: rt.func @apply_step
// CHECK-NEXT: rt.kernel adamw(%[[P:[^,]*]], %[[G:[^,]*]], %[[M:[^,]*]], %[[V:[^,]*]], %[[Q:[^,]*]], %[[QG:[^,]*]], %[[QM:[^,]*]], %[[QV:[^,]*]], %[[LR:[^,]*]], %[[S:[^,]*]], %[[C:[^,]*]], %[[SKIP:[^)]*]]) -> (%[[P]], %[[M]], %[[V]], %[[W:[^,]*]], %[[Q]], %[[QM]], %[[QV]], %[[QW:[^)]*]]) floats [9.000000e-01, 9.500000e-01, 1.000000e-08, 1.000000e-01, 1.000000e-01] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf16>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf16>)
// CHECK-NEXT: }
// A kernel that reads the old parameter before its select keeps the
// temporaries and the selects (the cast alone joins the adamw, its copy
// apart from them).
// CHECK: rt.func @read_between
// CHECK-NEXT: rt.kernel adamw({{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,]*}}, %[[RW:[^)]*]]) floats
// CHECK-NEXT: rt.kernel copy
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel select(%{{[^,]*}}, %{{[^,]*}}, %[[RW]])
// CHECK-NEXT: }
rt.program @selected pipeline_rank 0 arena 4096 {
  %p = rt.buffer 0 : memref<4xf32>
  %g = rt.buffer 64 : memref<4xf32>
  %m = rt.buffer 128 : memref<4xf32>
  %v = rt.buffer 192 : memref<4xf32>
  %w = rt.buffer 256 : memref<4xf16>
  %np = rt.buffer 320 : memref<4xf32>
  %nm = rt.buffer 384 : memref<4xf32>
  %nv = rt.buffer 448 : memref<4xf32>
  %nw = rt.buffer 384 : memref<4xf16>
  %skip = rt.buffer 576 : memref<f32>
  %lr = rt.buffer 640 : memref<f32>
  %s = rt.buffer 704 : memref<f32>
  %c = rt.buffer 768 : memref<f32>
  %q = rt.buffer 832 : memref<4xf32>
  %qg = rt.buffer 896 : memref<4xf32>
  %qm = rt.buffer 960 : memref<4xf32>
  %qv = rt.buffer 1024 : memref<4xf32>
  %nq = rt.buffer 1088 : memref<4xf32>
  %nqm = rt.buffer 1152 : memref<4xf32>
  %nqv = rt.buffer 1216 : memref<4xf32>
  %qw = rt.buffer 1280 : memref<4xf16>
  %nqw = rt.buffer 1344 : memref<4xf16>
  %x = rt.buffer 1408 : memref<4xf32>
  %rp = rt.buffer 1472 : memref<4xf32>
  %rm = rt.buffer 1536 : memref<4xf32>
  %rv = rt.buffer 1600 : memref<4xf32>
  %rw = rt.buffer 1664 : memref<4xf16>
  rt.func @apply_step args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%np, %nm, %nv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %np) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %nm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %nv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%np) -> (%nw) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel select(%skip, %w, %nw) -> (%w) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
    rt.kernel adamw(%q, %qg, %qm, %qv, %lr, %s, %c) -> (%nq, %nqm, %nqv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %q, %nq) -> (%q) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %qm, %nqm) -> (%qm) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %qv, %nqv) -> (%qv) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%nq) -> (%nqw) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel select(%skip, %qw, %nqw) -> (%qw) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
  }
  rt.func @read_between args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%rp, %rm, %rv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel copy(%p) -> (%x) : (memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %p, %rp) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %rm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %rv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%rp) -> (%rw) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel select(%skip, %w, %rw) -> (%w) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
  }
  rt.step [@apply_step, @read_between] microbatches [0, 0]
}

// -----

// ZeRO's f16 update: the 16-bit copy is selected into a piece that is then
// gathered (not in place). The parameter and moments still fuse; the cast
// stays, reading the parameter updated in place (on a skipped step it
// rounds the old one, which the select on the same flag drops). Where
// something else reads the rounded copy (a copy kernel), the selects stay
// (the cast alone joins the adamw, which has no flag then); a cast of the
// parameter after the selects does not join an adamw with a skip flag (its
// copy would go unwritten on a skipped step); a cast and select in another
// function stay where they are, and so does the adamw.
// CHECK-LABEL: rt.program @pieces
// CHECK: rt.func @apply_step
// CHECK-NEXT: rt.kernel adamw(%[[P:[^,]*]], %{{[^,]*}}, %[[M:[^,]*]], %[[V:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[SKIP:[^)]*]]) -> (%[[P]], %[[M]], %[[V]]) floats
// CHECK-NEXT: rt.kernel cast(%[[P]]) -> (%[[R:[^)]*]])
// CHECK-NEXT: rt.kernel all_slice
// CHECK-NEXT: rt.kernel select(%[[SKIP]], %{{[^,]*}}, %[[R]])
// CHECK-NEXT: }
// CHECK: rt.func @copied
// CHECK-NEXT: rt.kernel adamw({{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,]*}}, %[[CR:[^)]*]]) floats
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel select
// CHECK-NEXT: rt.kernel copy(%[[CR]])
// CHECK-NEXT: }
// CHECK: rt.func @late
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,)]*}}) floats
// CHECK-NEXT: rt.kernel cast
// CHECK-NEXT: rt.kernel copy
// CHECK-NEXT: }
// CHECK: rt.func @a
// CHECK-NEXT: rt.kernel adamw
// CHECK: rt.func @b
// CHECK: rt.kernel cast
// CHECK-NEXT: rt.kernel select
// The piece's select must read the flag the adamw reads, and nothing may
// read the cast's bytes through another buffer (on a skipped step they now
// hold the old parameter rounded): in both the selects stay, and the cast
// alone joins the adamw (without a flag), as a cast of its new parameter.
// CHECK: rt.func @flag_rewritten
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,]*}}, {{[^)]*}}) floats
// CHECK-NEXT: rt.kernel select
// CHECK: rt.func @aliased
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,]*}}, {{[^)]*}}) floats
// CHECK-NEXT: rt.kernel select
rt.program @pieces pipeline_rank 0 arena 8192 {
  %p = rt.buffer 0 : memref<4xf32>
  %g = rt.buffer 64 : memref<4xf32>
  %m = rt.buffer 128 : memref<4xf32>
  %v = rt.buffer 192 : memref<4xf32>
  %whole = rt.buffer 256 : memref<8xf16>
  %np = rt.buffer 320 : memref<4xf32>
  %nm = rt.buffer 384 : memref<4xf32>
  %nv = rt.buffer 448 : memref<4xf32>
  %r = rt.buffer 512 : memref<4xf16>
  %skip = rt.buffer 576 : memref<f32>
  %lr = rt.buffer 640 : memref<f32>
  %s = rt.buffer 704 : memref<f32>
  %c = rt.buffer 768 : memref<f32>
  %old = rt.buffer 832 : memref<4xf16>
  %piece = rt.buffer 896 : memref<4xf16>
  %cp = rt.buffer 960 : memref<4xf32>
  %cm = rt.buffer 1024 : memref<4xf32>
  %cv = rt.buffer 1088 : memref<4xf32>
  %cr = rt.buffer 1152 : memref<4xf16>
  %out = rt.buffer 1216 : memref<4xf16>
  %lp = rt.buffer 1280 : memref<4xf32>
  %lm = rt.buffer 1344 : memref<4xf32>
  %lv = rt.buffer 1408 : memref<4xf32>
  %lt = rt.buffer 1472 : memref<4xf16>
  %lw = rt.buffer 1536 : memref<4xf16>
  %xp = rt.buffer 1600 : memref<4xf32>
  %xm = rt.buffer 1664 : memref<4xf32>
  %xv = rt.buffer 1728 : memref<4xf32>
  %xw = rt.buffer 1792 : memref<4xf16>
  %xn = rt.buffer 1856 : memref<4xf16>
  %w = rt.buffer 1920 : memref<4xf16>
  %fp = rt.buffer 1984 : memref<4xf32>
  %fm = rt.buffer 2048 : memref<4xf32>
  %fv = rt.buffer 2112 : memref<4xf32>
  %fr = rt.buffer 2176 : memref<4xf16>
  %fpiece = rt.buffer 2240 : memref<4xf16>
  %ap = rt.buffer 2304 : memref<4xf32>
  %am = rt.buffer 2368 : memref<4xf32>
  %av = rt.buffer 2432 : memref<4xf32>
  %ar = rt.buffer 2496 : memref<4xf16>
  %arAlias = rt.buffer 2496 : memref<2x2xf16>
  %apiece = rt.buffer 2560 : memref<4xf16>
  %aout = rt.buffer 2624 : memref<2x2xf16>
  rt.func @apply_step args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%np, %nm, %nv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %np) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %nm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %nv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%np) -> (%r) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel all_slice(%whole) -> (%old) ints [0, 0] : (memref<8xf16>) -> memref<4xf16>
    rt.kernel select(%skip, %old, %r) -> (%piece) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
  }
  rt.func @copied args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%cp, %cm, %cv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %cp) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %cm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %cv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%cp) -> (%cr) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel copy(%cr) -> (%out) : (memref<4xf16>) -> memref<4xf16>
  }
  rt.func @late args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%lp, %lm, %lv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %lp) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %lm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %lv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%p) -> (%lt) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel copy(%lt) -> (%lw) : (memref<4xf16>) -> memref<4xf16>
  }
  rt.func @a args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%xp, %xm, %xv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %xp) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %xm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %xv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  }
  rt.func @b args() kinds [] results() names [] {
    rt.kernel copy(%w) -> (%xn) : (memref<4xf16>) -> memref<4xf16>
    rt.kernel cast(%xp) -> (%xw) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel select(%skip, %w, %xw) -> (%w) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
  }
  rt.func @flag_rewritten args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%fp, %fm, %fv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %fp) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %fm) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %fv) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%fp) -> (%fr) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel fill() -> (%skip) floats [0.0] : () -> memref<f32>
    rt.kernel select(%skip, %old, %fr) -> (%fpiece) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
  }
  rt.func @aliased args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%ap, %am, %av) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel select(%skip, %p, %ap) -> (%p) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %m, %am) -> (%m) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel select(%skip, %v, %av) -> (%v) : (memref<f32>, memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    rt.kernel cast(%ap) -> (%ar) : (memref<4xf32>) -> memref<4xf16>
    rt.kernel select(%skip, %old, %ar) -> (%apiece) : (memref<f32>, memref<4xf16>, memref<4xf16>) -> memref<4xf16>
    rt.kernel copy(%arAlias) -> (%aout) : (memref<2x2xf16>) -> memref<2x2xf16>
  }
  rt.step [@apply_step, @copied, @late, @a, @b, @flag_rewritten, @aliased] microbatches [0, 0, 0, 0, 0, 0, 0]
}

// -----

// Casts that stay: the parameter written between the update and the cast;
// the rounded copy read between them; the rounded copy on the bytes of
// the update's gradient (free once the update has read it). And adamws
// that stay apart: another lr; a tensor whose results share bytes with
// the one before it (split there: the third joins the second).
// CHECK-LABEL: rt.program @apart
// CHECK: rt.func @overwritten
// CHECK-NEXT: rt.kernel adamw({{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,)]*}}) floats
// CHECK-NEXT: rt.kernel scale_by
// CHECK-NEXT: rt.kernel cast
// CHECK: rt.func @read
// CHECK-NEXT: rt.kernel adamw({{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,)]*}}) floats
// CHECK-NEXT: rt.kernel copy
// CHECK-NEXT: rt.kernel cast
// CHECK: rt.func @reused
// CHECK-NEXT: rt.kernel adamw({{[^)]*}}) -> ({{[^,]*}}, {{[^,]*}}, {{[^,)]*}}) floats
// CHECK-NEXT: rt.kernel cast
// CHECK: rt.func @rates
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) ->
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) ->
// CHECK-NEXT: }
// CHECK: rt.func @clash
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) ->
// CHECK-NEXT: rt.kernel adamw(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) ->
// CHECK-NEXT: }
rt.program @apart pipeline_rank 0 arena 4096 {
  %p = rt.buffer 0 : memref<4xf32>
  %g = rt.buffer 64 : memref<4xf32>
  %m = rt.buffer 128 : memref<4xf32>
  %v = rt.buffer 192 : memref<4xf32>
  %w = rt.buffer 256 : memref<4xbf16>
  %lr = rt.buffer 320 : memref<f32>
  %lr2 = rt.buffer 384 : memref<f32>
  %s = rt.buffer 448 : memref<f32>
  %c = rt.buffer 512 : memref<f32>
  %x = rt.buffer 576 : memref<4xbf16>
  %onG = rt.buffer 64 : memref<4xbf16>
  %q = rt.buffer 640 : memref<4xf32>
  %qg = rt.buffer 704 : memref<4xf32>
  %qm = rt.buffer 768 : memref<4xf32>
  %qv = rt.buffer 832 : memref<4xf32>
  %r = rt.buffer 896 : memref<4xf32>
  %rv = rt.buffer 960 : memref<4xf32>
  %rm = rt.buffer 1024 : memref<4xf32>
  rt.func @overwritten args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%p, %m, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel scale_by(%p, %c) -> (%p) : (memref<4xf32>, memref<f32>) -> memref<4xf32>
    rt.kernel cast(%p) -> (%w) : (memref<4xf32>) -> memref<4xbf16>
  }
  rt.func @read args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%p, %m, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel copy(%w) -> (%x) : (memref<4xbf16>) -> memref<4xbf16>
    rt.kernel cast(%p) -> (%w) : (memref<4xf32>) -> memref<4xbf16>
  }
  rt.func @reused args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%p, %m, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel cast(%p) -> (%onG) : (memref<4xf32>) -> memref<4xbf16>
  }
  rt.func @rates args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%p, %m, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel adamw(%q, %qg, %qm, %qv, %lr2, %s, %c) -> (%q, %qm, %qv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
  }
  // The second tensor's gradient is the first's new parameter.
  rt.func @clash args() kinds [] results() names [] {
    rt.kernel adamw(%p, %g, %m, %v, %lr, %s, %c) -> (%p, %m, %v) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel adamw(%q, %p, %qm, %qv, %lr, %s, %c) -> (%q, %qm, %qv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
    rt.kernel adamw(%r, %g, %rm, %rv, %lr, %s, %c) -> (%r, %rm, %rv) floats [0.9, 0.95, 1.0e-8, 0.1] : (memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<f32>, memref<f32>, memref<f32>) -> (memref<4xf32>, memref<4xf32>, memref<4xf32>)
  }
  rt.step [@overwritten, @read, @reused, @rates, @clash] microbatches [0, 0, 0, 0, 0]
}

// -----

// Functions with layer spans (the forward and backward) are left alone.
// CHECK-LABEL: rt.program @layers
// CHECK: rt.func @step
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel sum_squares
// CHECK-NEXT: rt.kernel add
rt.program @layers pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4xf32>
  %b = rt.buffer 64 : memref<4xf32>
  %s0 = rt.buffer 128 : memref<f32>
  %s1 = rt.buffer 192 : memref<f32>
  %t = rt.buffer 256 : memref<f32>
  rt.func @step args() kinds [] results() names [] layers ["head 0"] at [0, 3] {
    rt.kernel sum_squares(%a) -> (%s0) : (memref<4xf32>) -> memref<f32>
    rt.kernel sum_squares(%b) -> (%s1) : (memref<4xf32>) -> memref<f32>
    rt.kernel add(%s0, %s1) -> (%t) : (memref<f32>, memref<f32>) -> memref<f32>
  }
  rt.step [@step] microbatches [0]
}
