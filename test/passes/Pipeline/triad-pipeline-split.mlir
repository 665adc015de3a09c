// Layers to pipeline stages: balanced by the IR's cost model (FLOPs and
// bytes; the embedding and the head weigh in, counts may be uneven), by
// hand with stages=, with virtual stages; a layer's backward runs on its forward's stage; the sum of
// the tied embedding's gradient parts is marked tied; bad cuts are errors.
// The input is the step of a 3-layer model (triad-gen, then autodiff).
// RUN: triad-gen --preset tiny --layers 3 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 -o %t.model.mlir
// RUN: triad-opt %t.model.mlir --triad-autodiff -o %t.step.mlir
// RUN: triad-opt %t.step.mlir --triad-pipeline-split=pp=2 | FileCheck %s --check-prefix=BAL
// RUN: triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 stages=1,2' | FileCheck %s --check-prefix=MANUAL
// RUN: triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 virtual-stages=2' | FileCheck %s --check-prefix=VIRTUAL
// RUN: triad-opt %t.step.mlir --triad-pipeline-split=pp=4 | FileCheck %s --check-prefix=PP4
// RUN: not triad-opt %t.step.mlir --triad-pipeline-split=pp=8 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 stages=1,1' 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 stages=3' 2>&1 | FileCheck %s --check-prefix=LIST
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=3 stages=3,0,0' 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 stages=a,3' 2>&1 | FileCheck %s --check-prefix=NUMBER
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 virtual-stages=0' 2>&1 | FileCheck %s --check-prefix=VIRTUAL0
// RUN: not triad-opt %t.model.mlir --triad-pipeline-split=pp=2 2>&1 | FileCheck %s --check-prefix=NO-STEP
// RUN: triad-opt %t.step.mlir --triad-pipeline-split=pp=2 -o %t.split.mlir
// RUN: not triad-opt %t.split.mlir --triad-pipeline-split=pp=2 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 flops-per-byte=-1' 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: triad-gen --preset tiny --layers 3 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 2048 -o %t.vocab.mlir
// RUN: triad-opt %t.vocab.mlir --triad-autodiff -o %t.vocab.step.mlir
// RUN: triad-opt %t.vocab.step.mlir '--triad-pipeline-split=pp=2 flops-per-byte=0' | FileCheck %s --check-prefix=FLOPS
// RUN: triad-opt %t.vocab.step.mlir --triad-pipeline-split=pp=2 | FileCheck %s --check-prefix=ROOFLINE
// RUN: triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 report=%t.stages' -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file %t.stages
// RUN: not triad-opt %t.step.mlir '--triad-pipeline-split=pp=2 report=%t.missing/stages' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NO-REPORT
// RUN: triad-gen --preset tiny --layers 3 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 | triad-opt '--triad-train-pipeline=pp=2 stage-report=%t.train-stages' -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file %t.train-stages
// RUN: triad-gen --preset tiny --layers 3 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 | not triad-opt '--triad-train-pipeline=stage-report=%t.none' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NO-PIPELINE

// report= writes the stages alone, one op per line (what triad-plan reads
// instead of the whole module); the training pipeline passes stage-report
// on to it. A file it cannot write is an error, as is a report without a
// pipeline.
// REPORT: {{^}}pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0", "transformer 1"] flops {{[0-9]+}} bytes {{[0-9]+}}{{$}}
// REPORT-NEXT: {{^}}pipe.stage 1 on rank 1 layers ["transformer 2", "head 0"] flops {{[0-9]+}} bytes {{[0-9]+}}{{$}}
// REPORT-NOT: pipe
// NO-REPORT: error: cannot write the stage report:
// NO-PIPELINE: stage-report={{.*}} writes a pipeline's stages and needs pp > 1

// A transformer layer costs about 2.8x the embedding and head together, so
// the cheapest largest stage is 3 layers against 2 (cost ties break to the
// first cut). Values crossing stages go through pipe.transfer: the
// activation forward, its gradient back.
// BAL: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0", "transformer 1"] flops 2740480 bytes 866688
// BAL-NEXT: pipe.stage 1 on rank 1 layers ["transformer 2", "head 0"] flops 1501185 bytes 457220
// BAL: triad.layer embedding 0 (%arg0) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 0 (%{{.*}}) {pipe.stage = 0 : i64}
// BAL: %[[OUT1:.*]]:10 = triad.layer transformer 1 (%{{.*}}) {pipe.stage = 0 : i64}
// BAL: %[[IN2:.*]] = pipe.transfer %[[OUT1]]#0 from 0 to 1 : tensor<4x8x32xf32>
// BAL-NEXT: triad.layer transformer 2 (%[[IN2]]) {pipe.stage = 1 : i64}
// BAL: triad.layer head 0 (%{{.*}}) {pipe.stage = 1 : i64}
// BAL: arith.constant {pipe.stage = 1 : i64}
// BAL: triad.layer head 0 backward ({{.*}}) {pipe.stage = 1 : i64}
// BAL: %[[GRAD2:.*]]:17 = triad.layer transformer 2 backward (%[[IN2]], {{.*}}) {pipe.stage = 1 : i64}
// BAL: %[[GRAD1:.*]] = pipe.transfer %[[GRAD2]]#0 from 1 to 0 : tensor<4x8x32xf32>
// BAL-NEXT: triad.layer transformer 1 backward (%{{.*}}, %[[GRAD1]], {{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 0 backward ({{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer embedding 0 backward ({{.*}}) {pipe.stage = 0 : i64}
// The tied embedding: the head's part (stage 1) plus the embedding's (0).
// BAL: triad.add %{{.*}}, %{{.*}} {pipe.tied = array<i64: 0, 1>}
// BAL-NOT: pipe.transfer

// MANUAL: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"]
// MANUAL-NEXT: pipe.stage 1 on rank 1 layers ["transformer 1", "transformer 2", "head 0"]

// Four stages on two ranks: stage s runs on rank s % 2, and each boundary
// has its transfers.
// VIRTUAL: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"]
// VIRTUAL-NEXT: pipe.stage 1 on rank 1 layers ["transformer 1"]
// VIRTUAL-NEXT: pipe.stage 2 on rank 0 layers ["transformer 2"]
// VIRTUAL-NEXT: pipe.stage 3 on rank 1 layers ["head 0"]
// VIRTUAL-COUNT-6: pipe.transfer
// VIRTUAL: pipe.tied = array<i64: 0, 3>

// PP4: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"]
// PP4-NEXT: pipe.stage 1 on rank 1 layers ["transformer 1"]
// PP4-NEXT: pipe.stage 2 on rank 2 layers ["transformer 2"]
// PP4-NEXT: pipe.stage 3 on rank 3 layers ["head 0"]

// Bytes weigh in: with a vocabulary of 2048 the head is a third of the
// FLOPs but little memory traffic beside the transformer layers' many
// elementwise ops. By FLOPs alone (flops-per-byte=0) it is a stage by
// itself; by the roofline cost (10 FLOPs per byte) the last transformer
// layer joins it.
// FLOPS: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0", "transformer 1", "transformer 2"]
// FLOPS-NEXT: pipe.stage 1 on rank 1 layers ["head 0"] flops 4195329 bytes 799108
// ROOFLINE: pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0", "transformer 1"]
// ROOFLINE-NEXT: pipe.stage 1 on rank 1 layers ["transformer 2", "head 0"] flops 5564417 bytes 1219076

// TOO-MANY: error: 'func.func' op cannot be cut into 8 pipeline stages (pp=8 x virtual-stages=1): it has only 5 layers (the embedding, the transformer layers and the head)
// COUNT: error: 'func.func' op stages=1,1 places 2 transformer layers, but the model has 3
// LIST: error: 'func.func' op stages=3 lists 1 stages, but pp x virtual-stages makes 2
// EMPTY: error: 'func.func' op stages=3,0,0 leaves stage 1 without a layer
// NUMBER: error: 'func.func' op stages=a,3: 'a' is not a count of transformer layers
// VIRTUAL0: error: virtual-stages=0 must be at least 1
// NO-STEP: error: needs @microbatch_step; run --triad-autodiff first
// TWICE: error: is already cut into pipeline stages (it has pipe.stage ops)
// NEGATIVE: error: flops-per-byte must not be negative
