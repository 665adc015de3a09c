// The training pipeline with pipeline stages: one program per pipeline rank
// whose step follows the schedule (each stage-microbatch pass a function,
// each transfer a send or receive); the memory report's activation peak per
// rank follows the schedule (at p=2 and m=8, 1F1B keeps at most 2
// microbatches in flight on the first stage where GPipe keeps 8); the comm
// report lists the tied embedding's exchange and the point-to-point traffic.
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 16 --batch 8 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2' | FileCheck %s --check-prefix=STEP
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8 schedule=gpipe' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=GPIPE
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2 schedule=zb-h1' | FileCheck %s --check-prefix=ZB
// RUN: not triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 stages=1,2' 2>&1 | FileCheck %s --check-prefix=STAGES

// STEP: rt.plan mesh ["dp", "pp", "tp"] = [1, 2, 1] seq 16 vocab 256 batch 8 microbatches 2 groups {{\[}}["pp"]]
// STEP: rt.program @rank0 pipeline_rank 0
// Both stages hold the tied embedding.
// STEP: rt.persistent "embed.wte" parameter
// STEP-NOT: rt.persistent "layers.1.
// STEP: rt.func @forward_s0_m0
// STEP: rt.kernel count_valid
// STEP: rt.kernel embedding
// STEP: rt.func @send_act_s0_m0
// STEP-NEXT: rt.kernel send(%{{.*}}) -> () ints [1, 0]
// STEP: rt.func @recv_grad_s0_m0
// STEP-NEXT: rt.kernel recv() -> (%{{.*}}) ints [1, 6]
// STEP: rt.func @apply_step
// STEP: rt.kernel all_reduce({{.*}}) -> ({{.*}}) ints [0] {reason = "the step's loss sum, computed on the last pipeline stage"}
// STEP: rt.kernel send(%{{.*}}) -> () ints [1, 32000] {reason = "the gradient part of tied embed.wte"}
// STEP: rt.kernel recv() -> ({{.*}}) ints [1, 32000] {reason = "the gradient part of tied embed.wte"}
// STEP: rt.kernel all_reduce({{.*}}) -> ({{.*}}) ints [0] {reason = "the gradient norm's sum of squares over the parameters of every pipeline stage"}
// STEP: rt.step [@begin_step, @forward_s0_m0, @send_act_s0_m0, @forward_s0_m1, @send_act_s0_m1, @recv_grad_s0_m0, @backward_s0_m0, @recv_grad_s0_m1, @backward_s0_m1, @apply_step] microbatches [0, 0, 0, 1, 1, 0, 0, 1, 1, 0]
// STEP: rt.program @rank1 pipeline_rank 1
// STEP: rt.persistent "embed.wte" parameter
// STEP-NOT: rt.persistent "layers.0.
// STEP: rt.step [@begin_step, @recv_act_s1_m0, @forward_s1_m0, @recv_act_s1_m1, @backward_s1_m0, @send_grad_s1_m0, @forward_s1_m1, @backward_s1_m1, @send_grad_s1_m1, @apply_step] microbatches [0, 0, 0, 1, 0, 0, 1, 1, 1, 0]

// ONE: program @rank0 (pipeline rank 0)
// ONE: activations at peak over the step {{.*}} (in recv_grad_s0_m0; at most 2 microbatches in flight)
// ONE: program @rank1 (pipeline rank 1)
// ONE: at most 1 microbatches in flight

// GPIPE: program @rank0 (pipeline rank 0)
// GPIPE: activations at peak over the step {{.*}} (in forward_s0_m7; at most 8 microbatches in flight)
// GPIPE: program @rank1 (pipeline rank 1)
// GPIPE: at most 8 microbatches in flight

// COMM: triad comm report: program @rank0 (pipeline rank 0), one optimizer step
// COMM: apply_step 1 send pp 2 32,768 the gradient part of tied embed.wte
// COMM: apply_step 1 recv pp 2 32,768 the gradient part of tied embed.wte
// COMM: point-to-point sends to pipeline rank 1: 3 per step, 49,152 B
// COMM: point-to-point receives from pipeline rank 1: 3 per step, 49,152 B

// Zero-bubble: the first stage's backward is all weight gradient (nothing
// to send back), the last stage's input part sends the gradient.
// ZB: rt.step [@begin_step, @forward_s0_m0, @send_act_s0_m0, @forward_s0_m1, @send_act_s0_m1, @recv_grad_s0_m0, @backward_weight_s0_m0, @recv_grad_s0_m1, @backward_weight_s0_m1, @apply_step]
// ZB: rt.step [@begin_step, @recv_act_s1_m0, @forward_s1_m0, @recv_act_s1_m1, @backward_input_s1_m0, @send_grad_s1_m0, @forward_s1_m1, @backward_input_s1_m1, @send_grad_s1_m1, @backward_weight_s1_m0, @backward_weight_s1_m1, @apply_step]

// STAGES: error: 'func.func' op stages=1,2 places 3 transformer layers, but the model has 2
