// RUN: triad-opt %s --triad-schedule-report='pp=2 microbatches=4' -o /dev/null | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %s --triad-schedule-report='pp=2 microbatches=4 schedule=gpipe' -o /dev/null | FileCheck %s --check-prefix=GPIPE
// RUN: triad-opt %s --triad-schedule-report='pp=2 microbatches=8 schedule=gpipe' -o /dev/null | FileCheck %s --check-prefix=GPIPE8
// RUN: triad-opt %s --triad-schedule-report='pp=2 microbatches=8' -o /dev/null | FileCheck %s --check-prefix=ONE8
// RUN: triad-opt %s --triad-schedule-report='pp=4 microbatches=8 schedule=interleaved virtual-stages=2' -o /dev/null | FileCheck %s --check-prefix=INTER
// RUN: triad-opt %s --triad-schedule-report='pp=4 microbatches=8 schedule=zb-h1' -o /dev/null | FileCheck %s --check-prefix=ZB
// RUN: triad-opt %s --triad-schedule-report='pp=4 microbatches=8 schedule=zero-bubble' -o /dev/null | FileCheck %s --check-prefix=ZB
// RUN: triad-opt %s --triad-schedule-report='pp=1 microbatches=1' -o /dev/null | FileCheck %s --check-prefix=SINGLE
// RUN: not triad-opt %s --triad-schedule-report='pp=4 microbatches=6 schedule=interleaved virtual-stages=2' -o /dev/null 2>&1 | FileCheck %s --check-prefix=MULTIPLE
// RUN: not triad-opt %s --triad-schedule-report='pp=2 microbatches=4 virtual-stages=2' -o /dev/null 2>&1 | FileCheck %s --check-prefix=VIRTUAL
// RUN: not triad-opt %s --triad-schedule-report='pp=0' -o /dev/null 2>&1 | FileCheck %s --check-prefix=RANKS
// RUN: not triad-opt %s --triad-schedule-report='pp=2 microbatches=0' -o /dev/null 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not triad-opt %s --triad-schedule-report='schedule=round-robin' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: triad-opt %s --triad-schedule-report='pp=2 microbatches=2' | FileCheck %s --check-prefix=IR
// RUN: triad-gen --preset tiny --layers 4 --hidden 32 --heads 2 --seq 16 --batch 8 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8 schedule=interleaved virtual-stages=2' --triad-schedule-report -o /dev/null | FileCheck %s --check-prefix=COMPILED
// RUN: not triad-opt %t.model.mlir '--triad-train-pipeline=pp=2 microbatches=8 schedule=interleaved virtual-stages=2' --triad-schedule-report=microbatches=4 -o /dev/null 2>&1 | FileCheck %s --check-prefix=DISAGREE

// 1F1B on 2 ranks and 4 microbatches: rank 0 warms up with one forward,
// then alternates; each send follows the pass that produces its data and
// each receive comes before the pass that consumes it; the bubble of a run
// where a backward costs two forwards is (p-1)/m; the first rank holds the
// activations of at most p microbatches.
// ONE: triad schedule report: 1f1b, 2 pipeline ranks, 4 microbatches, 1 stage per rank
// ONE-NEXT: rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 recv-grad0.0<1 B0.0 F0.2 send-act0.2>1 recv-grad0.1<1 B0.1 F0.3 send-act0.3>1 recv-grad0.2<1 B0.2 recv-grad0.3<1 B0.3 reduce-grads optimizer
// ONE-NEXT: rank 1: recv-act1.0<0 F1.0 recv-act1.1<0 B1.0 send-grad1.0>0 F1.1 B1.1 recv-act1.2<0 send-grad1.1>0 F1.2 B1.2 recv-act1.3<0 send-grad1.2>0 F1.3 B1.3 send-grad1.3>0 reduce-grads optimizer
// ONE-NEXT: check: every transfer matched, inputs before passes, no deadlock
// ONE-NEXT: bubble (F=1, B=2): 0.2500 of compute time (closed form (p-1)/m: 0.2500)
// ONE-NEXT: peak microbatches in flight per rank: 2 1

// GPipe: every forward, then every backward; the same bubble, but every
// microbatch's activations held at once.
// GPIPE: rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 F0.2 send-act0.2>1 F0.3 send-act0.3>1 recv-grad0.0<1 B0.0 recv-grad0.1<1 B0.1 recv-grad0.2<1 B0.2 recv-grad0.3<1 B0.3 reduce-grads optimizer
// GPIPE: bubble (F=1, B=2): 0.2500 of compute time (closed form (p-1)/m: 0.2500)
// GPIPE: peak microbatches in flight per rank: 4 4

// At p=2 and m=8 the first stage holds 8 microbatches under GPipe and 2
// under 1F1B, for the same bubble.
// GPIPE8: bubble (F=1, B=2): 0.1250 of compute time (closed form (p-1)/m: 0.1250)
// GPIPE8: peak microbatches in flight per rank: 8 8
// ONE8: bubble (F=1, B=2): 0.1250 of compute time (closed form (p-1)/m: 0.1250)
// ONE8: peak microbatches in flight per rank: 2 1

// Interleaved 1F1B with 2 stages per rank: rank 0 holds stages 0 and 4; the
// bubble shrinks by v.
// INTER: triad schedule report: interleaved, 4 pipeline ranks, 8 microbatches, 2 stages per rank
// INTER: rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 F0.2 send-act0.2>1 F0.3 send-act0.3>1 recv-act4.0<3 F4.0
// INTER: bubble (F=1, B=2): 0.1875 of compute time (closed form (p-1)/(v*m): 0.1875)

// Zero-bubble H1: backward split into input (BI) and weight (BW) halves,
// the weight halves filling the bubble: a third of 1F1B's, within 1F1B's
// memory.
// ZB: triad schedule report: zb-h1, 4 pipeline ranks, 8 microbatches, 1 stage per rank
// ZB: rank 3: {{.*}}BI3.0 send-grad3.0>2 {{.*}}BW3.0
// ZB: bubble (F=1, B=2): 0.1250 of compute time (closed form (p-1)/(3*m): 0.1250)
// ZB: peak microbatches in flight per rank: 4 3 2 1

// One rank: no transfers, no bubble.
// SINGLE: triad schedule report: 1f1b, 1 pipeline rank, 1 microbatch, 1 stage per rank
// SINGLE-NEXT: rank 0: F0.0 B0.0 reduce-grads optimizer
// SINGLE: bubble (F=1, B=2): 0.0000 of compute time (closed form (p-1)/m: 0.0000)

// Invalid combinations say why and what to do.
// MULTIPLE: error: --triad-schedule-report: the interleaved schedule needs the number of microbatches (6) to be a multiple of the pipeline ranks (4); use 4 or 8 microbatches
// VIRTUAL: error: --triad-schedule-report: schedule '1f1b' runs one stage per rank, but 2 virtual stages per rank were requested; use schedule 'interleaved' or 1 virtual stage
// RANKS: error: --triad-schedule-report: a pipeline needs at least 1 rank, got 0; set the pipeline-parallel size to 1 or more
// MICRO: error: --triad-schedule-report:
// NAME: error: --triad-schedule-report: unknown pipeline schedule 'round-robin'; use one of gpipe, 1f1b, interleaved, zb-h1

// The IR is left as it is.
// IR: module {
// IR-NEXT: func.func @f()
func.func @f() {
  return
}

// After the training pipeline the report is of the compiled schedule, not
// of the report's defaults (1f1b, pp=1, one microbatch).
// COMPILED: triad schedule report: interleaved, 2 pipeline ranks, 8 microbatches, 2 stages per rank
// COMPILED: peak microbatches in flight per rank:

// DISAGREE: error: --triad-schedule-report: the module is compiled for schedule=interleaved pp=2 microbatches=8 virtual-stages=2; give the report no options, or these
