// The schedule of the stages, per pipeline rank, recorded on the module and
// verified; a hand-written schedule is only verified, and one that cannot
// run (a receive before its send on both ranks) is an error naming the
// stuck action of each rank.
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 --triad-pipeline-split=pp=2 -o %t.split.mlir
// RUN: triad-opt %t.split.mlir --triad-pipeline-schedule | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %t.split.mlir --triad-pipeline-schedule=schedule=gpipe | FileCheck %s --check-prefix=GPIPE
// RUN: triad-opt %t.split.mlir --triad-pipeline-schedule=schedule=zb-h1 | FileCheck %s --check-prefix=ZB
// RUN: triad-opt %t.model.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 '--triad-pipeline-split=pp=2 virtual-stages=2' -o %t.virtual.mlir
// RUN: not triad-opt %t.virtual.mlir --triad-pipeline-schedule 2>&1 | FileCheck %s --check-prefix=INTER
// RUN: triad-opt %t.virtual.mlir --triad-pipeline-schedule=schedule=interleaved | FileCheck %s --check-prefix=INTER-OK
// RUN: not triad-opt %t.model.mlir --triad-pipeline-schedule 2>&1 | FileCheck %s --check-prefix=NO-STAGES
// RUN: triad-opt %s -split-input-file --triad-pipeline-schedule -verify-diagnostics | FileCheck %s --check-prefix=HAND

// ONE: pipe.schedule = {actions = {{\[}}["F0.0", "send-act0.0>1", "F0.1", "send-act0.1>1", "recv-grad0.0<1", "B0.0", "recv-grad0.1<1", "B0.1", "reduce-grads", "optimizer"], ["recv-act1.0<0", "F1.0", "recv-act1.1<0", "B1.0", "send-grad1.0>0", "F1.1", "B1.1", "send-grad1.1>0", "reduce-grads", "optimizer"]], microbatches = 2 : i64, name = "1f1b", ranks = 2 : i64, virtual_stages = 1 : i64}

// GPIPE: actions = {{\[}}["F0.0", "send-act0.0>1", "F0.1", "send-act0.1>1", "recv-grad0.0<1", "B0.0", "recv-grad0.1<1", "B0.1", "reduce-grads", "optimizer"], ["recv-act1.0<0", "F1.0", "recv-act1.1<0", "F1.1", "B1.0", "send-grad1.0>0", "B1.1", "send-grad1.1>0", "reduce-grads", "optimizer"]]

// ZB: actions = {{\[}}["F0.0", "send-act0.0>1", "F0.1", "send-act0.1>1", "recv-grad0.0<1", "BI0.0", "BW0.0", "recv-grad0.1<1", "BI0.1", "BW0.1", "reduce-grads", "optimizer"]

// INTER: error: has 2 stages per pipeline rank, which only the interleaved schedule runs (got schedule=1f1b)
// INTER-OK: microbatches = 2 : i64, name = "interleaved", ranks = 2 : i64, virtual_stages = 2 : i64
// NO-STAGES: error: has no pipeline stages (pipe.stages); run --triad-pipeline-split first

// A correct hand-written schedule is kept as written.
// HAND: pipe.schedule = {actions = {{\[}}["F0.0", "send-act0.0>1", "recv-grad0.0<1", "B0.0", "reduce-grads", "optimizer"], ["recv-act1.0<0", "F1.0", "B1.0", "send-grad1.0>0", "reduce-grads", "optimizer"]]
module attributes {pipe.schedule = {name = "1f1b", ranks = 2 : i64, microbatches = 1 : i64, virtual_stages = 1 : i64, actions = [["F0.0", "send-act0.0>1", "recv-grad0.0<1", "B0.0", "reduce-grads", "optimizer"], ["recv-act1.0<0", "F1.0", "B1.0", "send-grad1.0>0", "reduce-grads", "optimizer"]]}} {
}

// -----

// Both ranks wait for the other's gradient or activation first.
// expected-error @+1 {{the 1f1b schedule does not run}}
module attributes {pipe.schedule = {name = "1f1b", ranks = 2 : i64, microbatches = 1 : i64, virtual_stages = 1 : i64, actions = [["recv-grad0.0<1", "F0.0", "send-act0.0>1", "B0.0", "reduce-grads", "optimizer"], ["recv-act1.0<0", "F1.0", "B1.0", "send-grad1.0>0", "reduce-grads", "optimizer"]]}} {
}

// -----

// expected-error @+1 {{pipe.schedule, rank 1: schedule action 'F1': expected <stage>.<microbatch> after the kind}}
module attributes {pipe.schedule = {name = "1f1b", ranks = 2 : i64, microbatches = 1 : i64, virtual_stages = 1 : i64, actions = [["F0.0"], ["F1"]]}} {
}

// -----

// expected-error @+1 {{pipe.schedule lists actions for 1 ranks, but has ranks = 2}}
module attributes {pipe.schedule = {name = "1f1b", ranks = 2 : i64, microbatches = 1 : i64, virtual_stages = 1 : i64, actions = [["F0.0"]]}} {
}

// -----

// expected-error @+1 {{pipe.schedule needs name, ranks, microbatches, virtual_stages and actions}}
module attributes {pipe.schedule = {name = "1f1b"}} {
}
