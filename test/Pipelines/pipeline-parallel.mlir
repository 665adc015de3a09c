// The training pipeline with pipeline stages: one program per pipeline rank
// whose step follows the schedule; each stage's forward, backward and
// transfers are one function each, called once per microbatch with the
// microbatch's slot (the copy of the values the stage keeps between its
// calls), so the plan does not grow with microbatches; the memory report's
// kept activations per rank follow the schedule (at p=2 and m=8, 1F1B keeps
// 2 slots on the first stage where GPipe keeps 8); the comm report lists the
// tied embedding's exchange and the point-to-point traffic.
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 16 --batch 8 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2' | FileCheck %s --check-prefix=STEP
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=ONE
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 16 --batch 64 -o %t.many.mlir
// RUN: triad-opt %t.many.mlir '--triad-train-pipeline=pp=2 microbatches=64' | FileCheck %s --check-prefix=MANY
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8 schedule=gpipe' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=GPIPE
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2' --triad-comm-report -o /dev/null | FileCheck %s --check-prefix=COMM
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=2 schedule=zb-h1' | FileCheck %s --check-prefix=ZB
// RUN: not triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 stages=1,2' 2>&1 | FileCheck %s --check-prefix=STAGES

// STEP: rt.plan mesh ["dp", "pp", "tp"] = [1, 2, 1] seq 16 vocab 256 batch 8 microbatches 2 groups {{\[}}["pp"]]
// STEP: rt.program @rank0 pipeline_rank 0
// The values a stage keeps between calls have a copy per slot.
// STEP: rt.buffer {{[0-9]+}} slots 2 stride {{[0-9]+}} : memref<4x16x32xf32>
// Both stages hold the tied embedding.
// STEP: rt.persistent "embed.wte" parameter
// STEP-NOT: rt.persistent "layers.1.
// STEP: rt.func @forward_s0
// STEP: rt.kernel count_valid
// STEP: rt.kernel embedding
// STEP: rt.func @send_act_s0
// STEP-NEXT: rt.kernel send(%{{.*}}) -> () ints [1, 0]
// STEP: rt.func @recv_grad_s0
// STEP-NEXT: rt.kernel recv() -> (%{{.*}}) ints [1, 3]
// STEP: rt.func @apply_step
// STEP: rt.kernel all_reduce({{.*}}) -> ({{.*}}) ints [0] {reason = "the step's loss sum, computed on the last pipeline stage"}
// STEP: rt.kernel send(%{{.*}}) -> () ints [1, 32000] {reason = "the gradient part of tied embed.wte"}
// STEP: rt.kernel recv() -> ({{.*}}) ints [1, 32000] {reason = "the gradient part of tied embed.wte"}
// STEP: rt.kernel all_reduce({{.*}}) -> ({{.*}}) ints [0] {reason = "the gradient norm's sum of squares over the parameters of every pipeline stage"}
// STEP: rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_s0, @recv_grad_s0, @backward_s0, @apply_step] microbatches [0, 0, 0, 1, 1, 0, 0, 1, 1, 0] slots [0, 0, 0, 1, 1, 0, 0, 1, 1, 0]
// STEP: rt.program @rank1 pipeline_rank 1
// STEP: rt.persistent "embed.wte" parameter
// STEP-NOT: rt.persistent "layers.0.
// STEP: rt.step [@begin_step, @recv_act_s1, @forward_s1, @recv_act_s1, @backward_s1, @send_grad_s1, @forward_s1, @backward_s1, @send_grad_s1, @apply_step] microbatches [0, 0, 0, 1, 0, 0, 1, 1, 1, 0] slots [0, 0, 0, 1, 0, 0, 1, 1, 1, 0]

// ONE: program @rank0 (pipeline rank 0)
// ONE: activations kept between calls {{.*}} (2 slots; at most 2 microbatches in flight)
// ONE-NEXT: temporaries at peak {{.*}} (in backward_s0)
// ONE-NEXT: placed for the step's calls {{.*}} (in backward_s0)
// ONE-NEXT: placed for the optimizer step {{.*}} (in apply_step)
// ONE: arena {{.*}} (persistent tensors + activations kept between calls + the largest function's temporaries, aligned)
// ONE: program @rank1 (pipeline rank 1)
// The last stage receives the next microbatch's activations before the
// current one's backward: two slots, one microbatch computing.
// ONE: activations kept between calls {{.*}} (2 slots; at most 1 microbatches in flight)

// GPIPE: program @rank0 (pipeline rank 0)
// GPIPE: activations kept between calls {{.*}} (8 slots; at most 8 microbatches in flight)
// GPIPE: program @rank1 (pipeline rank 1)
// GPIPE: (8 slots; at most 8 microbatches in flight)

// With 64 microbatches the functions are still one per stage and kind: only
// the step's call list grows, and 1F1B still keeps at most 2 copies.
// MANY: rt.buffer {{[0-9]+}} slots 2 stride
// MANY-NOT: slots {{[3-9]|[1-9][0-9]}}
// MANY: rt.func @begin_step
// MANY-NOT: rt.func
// MANY: rt.func @forward_s0
// MANY-NOT: rt.func
// MANY: rt.func @send_act_s0
// MANY-NOT: rt.func
// MANY: rt.func @recv_grad_s0
// MANY-NOT: rt.func
// MANY: rt.func @backward_s0
// MANY-NOT: rt.func
// MANY: rt.func @apply_step
// MANY-NOT: rt.func
// MANY: rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0,
// MANY-SAME: microbatches [0, 0, 0, 1, 1, 0, 0, 2, 2, 1, 1,
// MANY-SAME: slots [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1,
// MANY: rt.program @rank1

// COMM: triad comm report: program @rank0 (pipeline rank 0), one optimizer step
// COMM: apply_step 1 send pp 2 32,768 the gradient part of tied embed.wte
// COMM: apply_step 1 recv pp 2 32,768 the gradient part of tied embed.wte
// COMM: point-to-point sends to pipeline rank 1: 3 per step, 49,152 B
// COMM: point-to-point receives from pipeline rank 1: 3 per step, 49,152 B

// Zero-bubble: the first stage's backward is all weight gradient (nothing
// to send back), the last stage's input part sends the gradient.
// ZB: rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0, @send_act_s0, @recv_grad_s0, @backward_weight_s0, @recv_grad_s0, @backward_weight_s0, @apply_step] microbatches [0, 0, 0, 1, 1, 0, 0, 1, 1, 0] slots [0, 0, 0, 1, 1, 0, 0, 1, 1, 0]
// ZB: rt.step [@begin_step, @recv_act_s1, @forward_s1, @recv_act_s1, @backward_input_s1, @send_grad_s1, @forward_s1, @backward_input_s1, @send_grad_s1, @backward_weight_s1, @backward_weight_s1, @apply_step] microbatches [0, 0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0] slots [0, 0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0]

// STAGES: error: 'func.func' op stages=1,2 places 3 transformer layers, but the model has 2
