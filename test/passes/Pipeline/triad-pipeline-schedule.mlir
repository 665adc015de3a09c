// The schedule of the stages, per pipeline rank, built, verified and
// recorded as a pipe.schedule; a hand-written schedule is kept (its
// verifier, the deadlock check, is tested in test/dialects/Pipe), but must
// run the module's stages.
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

// ONE: pipe.schedule "1f1b" microbatches 2 virtual_stages 1 {
// ONE-NEXT: pipe.rank 0 {
// ONE-NEXT: pipe.forward stage 0 microbatch 0
// ONE-NEXT: pipe.send activation stage 0 microbatch 0 to 1
// ONE-NEXT: pipe.forward stage 0 microbatch 1
// ONE-NEXT: pipe.send activation stage 0 microbatch 1 to 1
// ONE-NEXT: pipe.recv gradient stage 0 microbatch 0 from 1
// ONE-NEXT: pipe.backward stage 0 microbatch 0
// ONE-NEXT: pipe.recv gradient stage 0 microbatch 1 from 1
// ONE-NEXT: pipe.backward stage 0 microbatch 1
// ONE-NEXT: pipe.reduce_gradients
// ONE-NEXT: pipe.optimizer
// ONE-NEXT: }
// ONE-NEXT: pipe.rank 1 {
// ONE-NEXT: pipe.recv activation stage 1 microbatch 0 from 0
// ONE-NEXT: pipe.forward stage 1 microbatch 0
// ONE-NEXT: pipe.recv activation stage 1 microbatch 1 from 0
// ONE-NEXT: pipe.backward stage 1 microbatch 0
// ONE-NEXT: pipe.send gradient stage 1 microbatch 0 to 0
// ONE-NEXT: pipe.forward stage 1 microbatch 1
// ONE-NEXT: pipe.backward stage 1 microbatch 1
// ONE-NEXT: pipe.send gradient stage 1 microbatch 1 to 0
// ONE-NEXT: pipe.reduce_gradients
// ONE-NEXT: pipe.optimizer
// ONE-NEXT: }
// ONE-NEXT: }

// GPipe: rank 1 runs both forwards before the backwards.
// GPIPE: pipe.schedule "gpipe" microbatches 2 virtual_stages 1 {
// GPIPE: pipe.rank 1 {
// GPIPE-NEXT: pipe.recv activation stage 1 microbatch 0 from 0
// GPIPE-NEXT: pipe.forward stage 1 microbatch 0
// GPIPE-NEXT: pipe.recv activation stage 1 microbatch 1 from 0
// GPIPE-NEXT: pipe.forward stage 1 microbatch 1
// GPIPE-NEXT: pipe.backward stage 1 microbatch 0
// GPIPE-NEXT: pipe.send gradient stage 1 microbatch 0 to 0
// GPIPE-NEXT: pipe.backward stage 1 microbatch 1
// GPIPE-NEXT: pipe.send gradient stage 1 microbatch 1 to 0

// Zero-bubble: the backward split into its input and weight parts.
// ZB: pipe.schedule "zb-h1" microbatches 2 virtual_stages 1 {
// ZB-NEXT: pipe.rank 0 {
// ZB-NEXT: pipe.forward stage 0 microbatch 0
// ZB-NEXT: pipe.send activation stage 0 microbatch 0 to 1
// ZB-NEXT: pipe.forward stage 0 microbatch 1
// ZB-NEXT: pipe.send activation stage 0 microbatch 1 to 1
// ZB-NEXT: pipe.recv gradient stage 0 microbatch 0 from 1
// ZB-NEXT: pipe.backward_input stage 0 microbatch 0
// ZB-NEXT: pipe.backward_weight stage 0 microbatch 0
// ZB-NEXT: pipe.recv gradient stage 0 microbatch 1 from 1
// ZB-NEXT: pipe.backward_input stage 0 microbatch 1
// ZB-NEXT: pipe.backward_weight stage 0 microbatch 1
// ZB-NEXT: pipe.reduce_gradients
// ZB-NEXT: pipe.optimizer

// INTER: error: has 2 stages per pipeline rank, which only the interleaved schedule runs (got schedule=1f1b)
// Stage 2 is rank 0's second (virtual) stage: it receives from stage 1 on rank 1.
// INTER-OK: pipe.schedule "interleaved" microbatches 2 virtual_stages 2 {
// INTER-OK-NEXT: pipe.rank 0 {
// INTER-OK-NEXT: pipe.forward stage 0 microbatch 0
// INTER-OK-NEXT: pipe.send activation stage 0 microbatch 0 to 1
// INTER-OK-NEXT: pipe.forward stage 0 microbatch 1
// INTER-OK-NEXT: pipe.send activation stage 0 microbatch 1 to 1
// INTER-OK-NEXT: pipe.recv activation stage 2 microbatch 0 from 1
// NO-STAGES: error: has no pipeline stages (pipe.stage); run --triad-pipeline-split first

// A correct hand-written schedule is kept as written.
// HAND: pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
// HAND-NEXT: pipe.rank 0 {
// HAND-NEXT: pipe.forward stage 0 microbatch 0
// HAND-NEXT: pipe.send activation stage 0 microbatch 0 to 1
// HAND-NEXT: pipe.recv gradient stage 0 microbatch 0 from 1
// HAND-NEXT: pipe.backward stage 0 microbatch 0
pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
  pipe.rank 0 {
    pipe.forward stage 0 microbatch 0
    pipe.send activation stage 0 microbatch 0 to 1
    pipe.recv gradient stage 0 microbatch 0 from 1
    pipe.backward stage 0 microbatch 0
    pipe.reduce_gradients
    pipe.optimizer
  }
  pipe.rank 1 {
    pipe.recv activation stage 1 microbatch 0 from 0
    pipe.forward stage 1 microbatch 0
    pipe.backward stage 1 microbatch 0
    pipe.send gradient stage 1 microbatch 0 to 0
    pipe.reduce_gradients
    pipe.optimizer
  }
}

// -----

// A hand-written schedule for other stages than the module's.
// expected-error @+1 {{has 3 pipeline stages, but its pipe.schedule runs 2}}
module {
  pipe.stage 0 on rank 0 layers ["embedding 0"] flops 1 bytes 1
  pipe.stage 1 on rank 1 layers ["transformer 0"] flops 1 bytes 1
  pipe.stage 2 on rank 0 layers ["head 0"] flops 1 bytes 1
  pipe.schedule "1f1b" microbatches 1 virtual_stages 1 {
    pipe.rank 0 {
      pipe.forward stage 0 microbatch 0
      pipe.send activation stage 0 microbatch 0 to 1
      pipe.recv gradient stage 0 microbatch 0 from 1
      pipe.backward stage 0 microbatch 0
      pipe.reduce_gradients
      pipe.optimizer
    }
    pipe.rank 1 {
      pipe.recv activation stage 1 microbatch 0 from 0
      pipe.forward stage 1 microbatch 0
      pipe.backward stage 1 microbatch 0
      pipe.send gradient stage 1 microbatch 0 to 0
      pipe.reduce_gradients
      pipe.optimizer
    }
  }
}
