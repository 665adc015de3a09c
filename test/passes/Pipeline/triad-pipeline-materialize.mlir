// The microbatch step cut into the functions the schedule calls: one per
// stage and work, each called for every microbatch, with what one function
// keeps for a later one explicit (pipe.stash, pipe.unstash), and the plan
// holding as many copies of a kept value as the stage has microbatches in
// flight (2 at pp=2 under 1F1B), not one per microbatch (4 here).
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 8 --batch 8 --vocab 64 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir --triad-autodiff --triad-split-microbatches=microbatches=4 --triad-pipeline-split=pp=2 -o %t.split.mlir
// RUN: triad-opt %t.split.mlir --triad-pipeline-schedule -o %t.sched.mlir
// RUN: triad-opt %t.sched.mlir --triad-pipeline-materialize -o %t.mat.mlir
// RUN: FileCheck %s --check-prefix=ONE --input-file %t.mat.mlir
// RUN: triad-opt %t.mat.mlir --triad-lower-to-rt | FileCheck %s --check-prefix=SLOTS
// RUN: triad-opt %t.split.mlir --triad-pipeline-schedule=schedule=zb-h1 -o %t.zb.mlir
// RUN: triad-opt %t.zb.mlir --triad-pipeline-materialize | FileCheck %s --check-prefix=ZB
// RUN: triad-opt %t.model.mlir --triad-autodiff --triad-split-microbatches=microbatches=4 '--triad-pipeline-split=pp=2 virtual-stages=2' --triad-pipeline-schedule=schedule=interleaved --triad-pipeline-materialize | FileCheck %s --check-prefix=INTER

// Errors: the module is not ready, or the stages and their transfers do not
// fit (edited output of split and schedule).
// RUN: not triad-opt %t.split.mlir --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=NO-SCHEDULE
// RUN: not triad-opt %t.model.mlir --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=NO-STEP
// RUN: not triad-opt %t.mat.mlir --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: sed 's/triad.microbatches = 4/triad.microbatches = 2/' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: sed 's/pipe.backward_input stage 1 microbatch 0$/pipe.backward stage 1 microbatch 0/; /pipe.backward_weight stage 1 microbatch 0$/d' %t.zb.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: sed 's/%2 = pipe.transfer %1#0 from 0 to 1/%2 = pipe.transfer %1#0 from 1 to 0/' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=FROM
// RUN: sed 's/%7 = pipe.transfer %6#0 from 1 to 0/%7 = pipe.transfer %6#0 from 1 to 2/' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=DIRECTION
// RUN: sed '/%2 = pipe.transfer/d; s/(%2)/(%1#0)/; s/(%2, /(%1#0, /' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=UNSENT
// RUN: sed 's/triad.layer transformer 0 (%0) {pipe.stage = 0 : i64}/triad.layer transformer 0 (%0) {pipe.stage = 1 : i64}/; s/%2 = pipe.transfer %1#0 from 0 to 1/%2 = pipe.transfer %1#0 from 1 to 2/' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=BEYOND
// RUN: sed 's/{pipe.stage = 1 : i64}/{pipe.stage = 5 : i64}/' %t.sched.mlir | not triad-opt --triad-pipeline-materialize 2>&1 | FileCheck %s --check-prefix=STAGE

// Stage 0: the forward takes the tokens and labels, and keeps what its
// send and its backward read (the tokens too: the embedding's gradient
// reads them).
// ONE-NOT: func.func @microbatch_step
// ONE-LABEL: func.func @forward_s0(%arg0: tensor<2x8xi32> {triad.input = "tokens"}, %arg1: tensor<2x8xi32> {triad.input = "labels"}) attributes {pipe.stage = 0 : i64, pipe.work = "forward"} {
// ONE-NOT: pipe.unstash
// ONE: triad.embedding
// ONE: pipe.stash %{{.*}} as 0 : tensor<2x8x32xf32>
// ONE-NEXT: pipe.stash %{{.*}} as 2 : tensor<2x8x256xf32>
// ONE: pipe.stash %arg0 as 12 : tensor<2x8xi32>
// ONE-NEXT: return{{$}}
// ONE-LABEL: func.func @send_act_s0() attributes {pipe.stage = 0 : i64, pipe.work = "send_activation"} {
// ONE-NEXT: %[[OUT:.*]] = pipe.unstash 0 : tensor<2x8x32xf32>
// ONE-NEXT: pipe.send_tensor %[[OUT]] to stage 1 : tensor<2x8x32xf32>
// ONE-NEXT: return
// ONE-LABEL: func.func @recv_grad_s0() attributes {pipe.stage = 0 : i64, pipe.work = "recv_gradient"} {
// ONE-NEXT: %[[IN:.*]] = pipe.recv_tensor from stage 1 : tensor<2x8x32xf32>
// ONE-NEXT: pipe.stash %[[IN]] as 1 : tensor<2x8x32xf32>
// ONE-NEXT: return
// The backward returns the gradients it completes, the tied embedding's
// part among them.
// ONE-LABEL: func.func @backward_s0() -> (tensor<64x32xf32> {triad.grad = @embed.wte}, tensor<64x32xf32> {triad.grad = @embed.wpe},
// ONE-SAME: attributes {pipe.stage = 0 : i64, pipe.work = "backward"}
// ONE-NEXT: pipe.unstash 1 : tensor<2x8x32xf32>
// ONE: pipe.unstash 12 : tensor<2x8xi32>
// ONE-NOT: pipe.stash
// ONE: triad.embedding_grad
// ONE: return
// Stage 1: the labels are its only data; it returns the loss.
// ONE-LABEL: func.func @recv_act_s1() attributes {pipe.stage = 1 : i64, pipe.work = "recv_activation"} {
// ONE-NEXT: %[[ACT:.*]] = pipe.recv_tensor from stage 0 : tensor<2x8x32xf32>
// ONE-NEXT: pipe.stash %[[ACT]] as 0 : tensor<2x8x32xf32>
// ONE-LABEL: func.func @forward_s1(%arg0: tensor<2x8xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}) attributes {pipe.stage = 1 : i64, pipe.work = "forward"} {
// ONE-NEXT: pipe.unstash 0 : tensor<2x8x32xf32>
// ONE: triad.cross_entropy
// ONE: pipe.stash %arg0 as 2 : tensor<2x8xi32>
// ONE-LABEL: func.func @backward_s1() -> (tensor<64x32xf32> {triad.grad = @embed.wte},
// ONE: triad.cross_entropy_grad
// ONE: pipe.stash %{{.*}} as 14 : tensor<2x8x32xf32>
// ONE-LABEL: func.func @send_grad_s1() attributes {pipe.stage = 1 : i64, pipe.work = "send_gradient"} {
// ONE-NEXT: %[[GRAD:.*]] = pipe.unstash 14 : tensor<2x8x32xf32>
// ONE-NEXT: pipe.send_tensor %[[GRAD]] to stage 0 : tensor<2x8x32xf32>
// ONE-NOT: func.func @microbatch_step
// ONE: func.func @apply_step

// Four microbatches, at most two copies of a kept value: stage 0 holds two
// microbatches in flight; stage 1 one, but its next activation arrives
// while the previous microbatch still waits for its backward. Each call
// names its copy.
// SLOTS: rt.program @rank0 pipeline_rank 0
// SLOTS: rt.buffer {{[0-9]+}} slots 2 stride 2048 : memref<2x8x32xf32>
// SLOTS-NOT: slots {{[3-9]}}
// SLOTS: rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_s0, @recv_grad_s0, @backward_s0, @apply_step] microbatches [0, 0, 0, 1, 1, 0, 0, 2, 2, 1, 1, 3, 3, 2, 2, 3, 3, 0] slots [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0]
// SLOTS: rt.program @rank1 pipeline_rank 1
// SLOTS: rt.buffer {{[0-9]+}} slots 2 stride 2048 : memref<2x8x32xf32>
// SLOTS-NOT: slots {{[2-9]}}
// SLOTS: rt.step [@begin_step, @recv_act_s1, @forward_s1, @recv_act_s1, @backward_s1, @send_grad_s1, @forward_s1, @backward_s1, @recv_act_s1, @send_grad_s1, @forward_s1, @backward_s1, @recv_act_s1, @send_grad_s1, @forward_s1, @backward_s1, @send_grad_s1, @apply_step] microbatches [0, 0, 0, 1, 0, 0, 1, 1, 2, 1, 2, 2, 3, 2, 3, 3, 3, 0] slots [0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0]

// Zero-bubble: the last stage's backward in its input half (what the stage
// before waits for) and its weight half; the first stage sends nothing
// back, so its backward is all weight gradient.
// ZB-NOT: @backward_input_s0
// ZB: func.func @backward_weight_s0() -> (tensor<64x32xf32> {triad.grad = @embed.wte},
// ZB-SAME: pipe.work = "backward_weight"
// ZB: func.func @backward_input_s1()
// ZB-SAME: pipe.work = "backward_input"
// ZB: triad.cross_entropy_grad
// ZB: pipe.stash
// ZB: func.func @backward_weight_s1() -> (tensor<64x32xf32> {triad.grad = @embed.wte},
// ZB-NOT: triad.cross_entropy_grad
// ZB: func.func @send_grad_s1()

// Interleaved: four stages on two ranks, each with its own functions; the
// middle stages send both ways.
// INTER: func.func @forward_s0(
// INTER: func.func @backward_s0() -> (tensor<64x32xf32> {triad.grad = @embed.wte}, tensor<64x32xf32> {triad.grad = @embed.wpe})
// INTER: func.func @send_act_s1()
// INTER-NEXT: pipe.unstash
// INTER-NEXT: pipe.send_tensor %{{.*}} to stage 2
// INTER: func.func @send_grad_s1()
// INTER-NEXT: pipe.unstash
// INTER-NEXT: pipe.send_tensor %{{.*}} to stage 0
// INTER: func.func @recv_act_s2()
// INTER-NEXT: pipe.recv_tensor from stage 1
// INTER: func.func @forward_s3(%arg0: tensor<2x8xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"})
// INTER: func.func @backward_s3() -> (tensor<64x32xf32> {triad.grad = @embed.wte},

// NO-SCHEDULE: error: has no pipe.schedule; run --triad-pipeline-schedule first
// NO-STEP: error: needs @microbatch_step cut into stages; run --triad-autodiff, --triad-pipeline-split and --triad-pipeline-schedule first
// TWICE: error: 'func.func' op is a stage function already; the module's stages are materialized
// COUNT: error: the pipeline schedule runs 4 microbatches, but the step is split into 2
// BOTH: error: 'func.func' op pipeline stage 1 is scheduled both whole and split into zero-bubble's halves; a stage's backward runs one way
// FROM: error: 'pipe.transfer' op moves a value from stage 1, which stage 0 computes
// DIRECTION: error: 'pipe.transfer' op moves a gradient from stage 1 to stage 2; activations go to the next stage, gradients to the previous one
// UNSENT: error: 'triad.layer_norm' op on pipeline stage 1 reads a value of stage 0 that no pipe.transfer brings to it
// BEYOND: error: 'pipe.transfer' op moves a value to stage 2 of 2
// STAGE: error: 'triad.layer' op has no pipeline stage below 2 (pipe.stage); run --triad-pipeline-split for the schedule's stages
