// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline | FileCheck %s
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=1 tp=1 pp=1 zero=0 schedule=gpipe recompute=full order=pp,dp,tp dtype=f32 lr=0.01 warmup=5 clip-norm=0.5' | FileCheck %s --check-prefix=OPTS
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=virtual-stages=2 schedule=interleaved' 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=zero=4 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 zero=2' | FileCheck %s --check-prefix=ZERO2
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=dp=2 | FileCheck %s --check-prefix=DP
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 overlap-grad-reduce=false' | FileCheck %s --check-prefix=DPAPPLY
// RUN: triad-gen --preset tiny --layers 1 --batch 8 | triad-opt '--triad-train-pipeline=dp=2 microbatches=2' | FileCheck %s --check-prefix=DPMB2
// RUN: triad-gen --preset tiny --layers 1 --batch 8 | triad-opt '--triad-train-pipeline=tp=2 microbatches=2' | FileCheck %s --check-prefix=TPMB2
// RUN: triad-gen --preset tiny --layers 2 --batch 8 | triad-opt '--triad-train-pipeline=dp=2 pp=2 microbatches=2' | FileCheck %s --check-prefix=PPDP
// RUN: triad-gen --preset tiny --layers 2 --batch 8 | triad-opt '--triad-train-pipeline=dp=2 pp=2 microbatches=2 overlap-grad-reduce=false' | FileCheck %s --check-prefix=PPDPOFF
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=microbatches=2 | FileCheck %s --check-prefix=MB
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=dp=4 2>&1 | FileCheck %s --check-prefix=DP4
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 microbatches=2' 2>&1 | FileCheck %s --check-prefix=DPMB
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=schedule=round-robin 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=virtual-stages=2 2>&1 | FileCheck %s --check-prefix=VIRTUAL
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=recompute=some 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=dtype=f64 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=microbatches=0 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=sp=true 2>&1 | FileCheck %s --check-prefix=SP
// RUN: triad-gen --preset tiny --layers 1 --dtype f16 --batch 4 | triad-opt '--triad-train-pipeline=dp=2 microbatches=2' | FileCheck %s --check-prefix=F16PIECES
// RUN: triad-gen --preset tiny --layers 1 --dropout 0.1 | triad-opt --triad-train-pipeline | FileCheck %s --check-prefix=EVALDROP
// RUN: triad-gen --preset tiny --layers 1 --heads 4 | not triad-opt --triad-train-pipeline=tp=3 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: triad-gen --preset tiny --layers 1 --heads 4 --kv-heads 2 | not triad-opt --triad-train-pipeline=tp=4 2>&1 | FileCheck %s --check-prefix=KVHEADS
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 zero=2 bucket-bytes=32' | FileCheck %s --check-prefix=BUCKETS
// RUN: triad-opt %S/../passes/Lowering/Inputs/two-params.mlir '--triad-train-pipeline=dp=2 bucket-bytes=32' | FileCheck %s --check-prefix=DPBUCKETS
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=bucket-bytes=0 2>&1 | FileCheck %s --check-prefix=NOBUCKET
// RUN: not triad-opt %S/../passes/Lowering/Inputs/two-params.mlir --triad-train-pipeline=vocab-multiple=0 2>&1 | FileCheck %s --check-prefix=NOMULTIPLE

// The default pipeline on the 1x1x1 mesh: autodiff, then one rt program.
// CHECK-NOT: func.func
// CHECK-NOT: triad.param
// CHECK: rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
// CHECK: rt.program @rank0 pipeline_rank 0
// CHECK: rt.func @microbatch_step
// The schedule decays over the run by default (decay -1: the runtime's
// last step).
// CHECK: rt.kernel lr_schedule({{.*}}) -> ({{.*}}) ints [0, -1] floats [3.000000e-04, 0.000000e+00]
// CHECK: rt.kernel clip_coefficient({{.*}}) -> ({{.*}}) floats [1.000000e+00]
// Evaluation's forward pass: the microbatch step's kernels its loss sum and
// token count depend on, on temporaries of its own, outside the step.
// CHECK: rt.func @eval_step args(%[[TOKENS:[0-9]+]], %[[LABELS:[0-9]+]] : memref<2x4xi32>, memref<2x4xi32>) kinds ["tokens", "labels"] results() names [] layers ["embedding 0", "head 0"] at [2, 3, 3, 6] {
// CHECK-NEXT: rt.kernel count_valid(%[[LABELS]])
// CHECK-NEXT: rt.kernel fill()
// CHECK-NEXT: rt.kernel embedding(%[[TOKENS]], %0)
// CHECK-NEXT: rt.kernel rms_norm
// CHECK-NEXT: rt.kernel matmul
// CHECK-NEXT: rt.kernel cross_entropy(
// CHECK-NEXT: rt.kernel accumulate
// CHECK-NEXT: rt.kernel accumulate
// CHECK-NEXT: }
// CHECK: rt.step [@begin_step, @microbatch_step, @apply_step] microbatches [0, 0, 0]

// Options reach the passes: the mesh order, the optimizer's settings, and
// full recomputation (the forward kernels run again before the backward).
// OPTS: rt.plan mesh ["pp", "dp", "tp"] = [1, 1, 1]
// OPTS: rt.func @microbatch_step
// OPTS-COUNT-2: rt.kernel rms_norm(
// OPTS: rt.kernel lr_schedule({{.*}}) -> ({{.*}}) ints [5, -1] floats [1.000000e-02, 0.000000e+00]
// OPTS: rt.kernel clip_coefficient({{.*}}) -> ({{.*}}) floats [5.000000e-01]

// REPORT: triad memory report: program @rank0 (pipeline rank 0)
// REPORT: arena

// MESH: error: --triad-train-pipeline: virtual-stages=2 interleaves the stages of several pipeline ranks and needs pp > 1
// ZERO: error: --triad-train-pipeline: zero=4 is not a ZeRO stage (0, 1, 2 or 3)

// ZeRO-2: each rank weights its gradient by its own token count before the
// reduce_scatter sums the ranks' pieces (the ranks may count different
// tokens), then adds its piece to its half-size accumulator unweighted.
// Both gradients reduce-scatter in one bucket (the norm's sank past the
// backward that followed it), and the pieces are added after it.
// ZERO2: rt.func @microbatch_step
// ZERO2: rt.kernel count_valid(%{{.*}}) -> (%[[COUNT:[0-9a-z_]+]])
// ZERO2: rt.kernel fill() -> (%[[ONE:[0-9a-z_]+]]) floats [1.000000e+00]
// ZERO2: rt.kernel scale_by(%{{.*}}, %[[COUNT]]) -> (%[[WEIGHTED:[0-9a-z_]+]]) : (memref<16x8xf32>, memref<f32>) -> memref<16x8xf32>
// ZERO2-NEXT: rt.kernel reduce_scatter(%{{[0-9a-z_]+}}, %[[WEIGHTED]]) -> (%{{[0-9a-z_]+}}, %[[PIECE:[0-9a-z_]+]]) ints [0, 0, 0] {{.*}} : (memref<8xf32>, memref<16x8xf32>) -> (memref<4xf32>, memref<8x8xf32>)
// ZERO2-NEXT: rt.kernel accumulate(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %[[ONE]])
// ZERO2-NEXT: rt.kernel accumulate(%[[ACC:[0-9a-z_]+]], %[[PIECE]], %[[ONE]]) -> (%[[ACC]])
// ZERO2: rt.func @apply_step
// ZERO2-NOT: reduce_scatter
// ZERO2: rt.step

// bucket-bytes reaches both places that bucket: ZeRO-2's reduce-scatters in
// the backward, each gradient in its own bucket when it is larger (so the
// first starts while the backward still runs), and the all-reduces of the
// gradients entering @apply_step.
// BUCKETS: rt.func @microbatch_step
// BUCKETS-COUNT-2: rt.kernel reduce_scatter(%{{[0-9a-z_]+}}) -> (%{{[0-9a-z_]+}}) ints [0, 0]
// BUCKETS: rt.func @apply_step
// Each in its own bucket, the norm weight's gradient is all-reduced while
// the backward still has the embedding's gradient to compute.
// DPBUCKETS: rt.func @microbatch_step
// DPBUCKETS: rt.kernel accumulate(%[[NORM:[0-9a-z_]+]], {{.*}} : (memref<8xf32>
// DPBUCKETS-NEXT: rt.kernel all_reduce(%[[NORM]]) -> (%[[NORM]]) ints [0] {reason = "gradients of @microbatch_step, partial over dp: 1 tensor in one bucket, reduced as soon as its bucket is complete (overlap-grad-reduce)"}
// DPBUCKETS-NEXT: rt.kernel embedding_grad(
// DPBUCKETS: rt.kernel accumulate(%[[EMBED:[0-9a-z_]+]], {{.*}} : (memref<16x8xf32>
// DPBUCKETS-NEXT: rt.kernel all_reduce(%[[EMBED]]) -> (%[[EMBED]])
// DPBUCKETS: rt.func @apply_step
// DPBUCKETS-NOT: gradients of
// DPBUCKETS: rt.func @eval_step
// NOBUCKET: error: --triad-train-pipeline: bucket-bytes=0 must be at least 1
// NOMULTIPLE: error: --triad-train-pipeline: vocab-multiple=0 must be between 1 and 65536

// Data parallel: each rank computes on its half of the batch. With one
// microbatch (overlap-grad-reduce, the default) the gradient accumulators
// are all-reduced over dp in the microbatch step, right after the
// accumulate that completes the last of their bucket (the backward goes on
// while they move), and the loss sum and token count after theirs; the
// apply step divides the loss sum by the count, and scales the gradient
// norm and the clipping coefficient by its inverse (fold-token-mean).
// DP: rt.plan mesh ["dp", "pp", "tp"] = [2, 1, 1] seq 4 vocab 16 batch 2 microbatches 1 groups {{\[}}["dp"]]
// The loss sum and the token count lie side by side and are reduced by one
// kernel; so are the two gradients (16x8 and 8 floats: 136, one bucket).
// DP: %[[GRADS:[0-9a-z_]+]] = rt.buffer {{[0-9]+}} : memref<136xf32>
// DP: %[[SUMS:[0-9a-z_]+]] = rt.buffer {{[0-9]+}} : memref<17xf32>
// DP: rt.func @microbatch_step args(%{{.*}}, %{{.*}} : memref<1x4xi32>, memref<1x4xi32>) kinds ["tokens", "labels"]
// DP: rt.kernel accumulate(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) -> (%{{[0-9a-z_]+}}) : (memref<16x8xf32>
// DP-NEXT: rt.kernel all_reduce(%[[GRADS]]) -> (%[[GRADS]]) ints [0] {reason = "gradients of @microbatch_step, partial over dp: 2 tensors in one bucket, reduced as soon as its bucket is complete (overlap-grad-reduce)"} : (memref<136xf32>)
// DP: rt.kernel all_reduce(%[[SUMS]]) -> (%[[SUMS]]) ints [0] {reason = "the step{{.}}s loss sum and token count, partial over dp, reduced as soon as its bucket is complete (overlap-grad-reduce)"} : (memref<17xf32>)
// DP-NEXT: }
// DP: rt.func @apply_step
// DP-NEXT: rt.kernel reciprocal(
// DP-NEXT: rt.kernel scale_by
// DP-NOT: rt.kernel scale_by
// DP-NOT: all_reduce
// Evaluation's forward pass (made from the microbatch step before the
// move) reduces nothing: the trainer sums its ranks' losses itself.
// DP: rt.func @eval_step
// DP-NOT: all_reduce
// DP: rt.step [@begin_step, @microbatch_step, @apply_step]
// Without it, everything is all-reduced at the start of the apply step,
// the gradients after the loss sum's division by the count.
// DPAPPLY: %[[SUMS:[0-9a-z_]+]] = rt.buffer {{[0-9]+}} : memref<17xf32>
// DPAPPLY: %[[GRADS:[0-9a-z_]+]] = rt.buffer {{[0-9]+}} : memref<136xf32>
// DPAPPLY: rt.func @microbatch_step
// DPAPPLY-NOT: all_reduce
// DPAPPLY: rt.func @apply_step
// DPAPPLY-NEXT: rt.kernel all_reduce(%[[SUMS]]) -> (%[[SUMS]]) ints [0] {reason = "the step{{.}}s loss sum and token count, partial over dp"} : (memref<17xf32>)
// DPAPPLY-NEXT: rt.kernel reciprocal(
// DPAPPLY-NEXT: rt.kernel scale_by
// DPAPPLY-NEXT: rt.kernel all_reduce(%[[GRADS]]) -> (%[[GRADS]]) ints [0] {reason = "gradients entering @apply_step, partial over dp: 2 tensors in one bucket"} : (memref<136xf32>)
// DPAPPLY-NOT: all_reduce
// DPAPPLY: rt.step [@begin_step, @microbatch_step, @apply_step]
// With several microbatches the sums are reduced once, in the backward of
// the last: the step calls a copy of the microbatch step for it, with the
// all-reduces (one more function, whatever the count).
// DPMB2: rt.func @microbatch_step
// DPMB2-NOT: all_reduce
// DPMB2: rt.func @apply_step
// DPMB2-NOT: all_reduce({{.*}}gradients entering
// DPMB2: rt.func @last_microbatch_step
// DPMB2: rt.kernel all_reduce({{.*}}reason = "gradients of @last_microbatch_step, partial over dp
// DPMB2: rt.step [@begin_step, @microbatch_step, @last_microbatch_step, @apply_step] microbatches [0, 0, 1, 0]
// Under a pipeline, the rank's last call before the apply step (here a
// copy of its function for the last microbatch) all-reduces the gradients
// at its end: the first stage's last backward right after each bucket is
// complete, the last stage after it sends its last gradient (never before
// a transfer). The tied embedding's gradient stays in the apply step,
// which first adds the part of the other stage.
// PPDP: rt.program @rank0
// PPDP: rt.func @backward_s0 args
// PPDP-NOT: all_reduce
// PPDP: rt.func @apply_step
// PPDP: rt.kernel recv(
// PPDP: rt.kernel all_reduce({{.*}}reason = "gradients entering @apply_step, partial over dp: 1 of its 36 tensors in one bucket"} : (memref<256x64xf32>)
// PPDP: rt.func @backward_s0_last args
// PPDP: rt.kernel all_reduce({{.*}}reason = "gradients of @backward_s0_last, partial over dp: 17 of its 36 tensors in one bucket, reduced as soon as its bucket is complete (overlap-grad-reduce)"
// PPDP: rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_s0, @recv_grad_s0, @backward_s0_last, @apply_step]
// PPDP: rt.program @rank1
// PPDP: rt.func @send_grad_s1_last args
// PPDP-NEXT: rt.kernel send(
// PPDP: rt.kernel all_reduce({{.*}}reason = "gradients of @send_grad_s1_last, partial over dp
// PPDP: rt.step [{{.*}}@backward_s1, @send_grad_s1_last, @apply_step]
// PPDPOFF-NOT: _last
// A tensor-parallel sum of norm weights alone is not worth the copy: it
// stays in the apply step.
// TPMB2: rt.func @apply_step
// TPMB2: rt.kernel all_reduce({{.*}}reason = "gradients entering @apply_step, partial over tp
// TPMB2-NOT: last_microbatch_step
// TPMB2: rt.step [@begin_step, @microbatch_step, @microbatch_step, @apply_step]

// Microbatches: the step calls the microbatch step on each half of the
// batch in turn, with no communication.
// MB: rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 2
// MB-NOT: groups
// MB: rt.func @microbatch_step args(%{{.*}}, %{{.*}} : memref<1x4xi32>, memref<1x4xi32>)
// MB-NOT: all_reduce
// MB: rt.step [@begin_step, @microbatch_step, @microbatch_step, @apply_step] microbatches [0, 0, 1, 0]

// DP4: error: --triad-train-pipeline: the global batch of 2 sequences does not split into dp=4 replicas x microbatches=1 (4 pieces); choose dp and microbatches whose product divides 2, or generate the model with --batch a multiple of 4
// The check names the user's numbers, not the batch of one microbatch.
// DPMB: error: --triad-train-pipeline: the global batch of 2 sequences does not split into dp=2 replicas x microbatches=2 (4 pieces)
// SCHEDULE: error: --triad-train-pipeline: schedule 'round-robin' is unknown (gpipe, 1f1b, interleaved, zb-h1 or zero-bubble, the same as zb-h1)
// VIRTUAL: error: --triad-train-pipeline: virtual-stages=2 needs schedule=interleaved
// RECOMPUTE: error: --triad-train-pipeline: recompute 'some' is unknown (none, selective or full)
// DTYPE: error: --triad-train-pipeline: dtype 'f64' is unknown (f32, bf16 or f16)
// MICRO: error: --triad-train-pipeline: microbatches=0 must be at least 1
// SP: error: --triad-train-pipeline: sp (sequence parallelism) splits the sequence over tp and needs tp > 1 (got tp=1)
// A tp that does not divide the heads is named as such, before any op
// fails to split.
// HEADS: error: --triad-train-pipeline: tp=3 does not divide the model's 4 attention heads (tensor parallelism splits attention by heads); choose a tp that divides 4
// KVHEADS: error: --triad-train-pipeline: tp=4 does not divide the model's 2 kv heads (tensor parallelism splits attention by heads); choose a tp that divides 2
// f16 at dp=2 with 2 microbatches: the step's loss is the mean of 4
// microbatch losses, so each backward starts from a quarter of the loss
// scale (its gradients are its share of the step's, as large per token as
// on one rank) and the apply step unscales by 4 / scale; an element of the
// summed gradients above 65504 / 4 overflows the step, as it would in one
// rank's f16 gradient of the whole step.
// F16PIECES: rt.func @microbatch_step
// F16PIECES: rt.kernel scale(%{{.*}}) -> (%{{.*}}) floats [2.500000e-01] : (memref<f32>) -> memref<f32>
// F16PIECES: rt.func @apply_step
// F16PIECES: rt.kernel sum_squares(%{{.*}}) -> (%{{.*}}) floats [1.637600e+04]
// F16PIECES: rt.kernel loss_scale_update
// F16PIECES: rt.kernel fill() -> (%{{.*}}) floats [4.000000e+00] : () -> memref<f32>
// Evaluation does not drop: the microbatch step's dropouts are copies in
// eval_step.
// EVALDROP: rt.func @microbatch_step
// EVALDROP: rt.kernel dropout(
// EVALDROP: rt.func @eval_step
// EVALDROP-NOT: rt.kernel dropout(
// EVALDROP: rt.kernel copy(
// EVALDROP-NOT: rt.kernel dropout(
// EVALDROP: rt.step
