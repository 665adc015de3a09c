// Layers to pipeline stages: balanced by the IR's FLOPs (the embedding and
// the head weigh in, counts may be uneven), by hand with stages=, with
// virtual stages; a layer's backward runs on its forward's stage; the sum of
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

// A transformer layer costs about 2.8x the embedding and head together, so
// the cheapest largest stage is 3 layers against 2 (cost ties break to the
// first cut).
// BAL: module attributes {pipe.costs = [2786624, 1524321], pipe.stages = {{\[}}["embedding 0", "transformer 0", "transformer 1"], ["transformer 2", "head 0"]]
// BAL: triad.layer embedding 0 (%arg0) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 0 (%{{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 1 (%{{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 2 (%{{.*}}) {pipe.stage = 1 : i64}
// BAL: triad.layer head 0 (%{{.*}}) {pipe.stage = 1 : i64}
// BAL: arith.constant {pipe.stage = 1 : i64}
// BAL: triad.layer head 0 backward ({{.*}}) {pipe.stage = 1 : i64}
// BAL: triad.layer transformer 2 backward ({{.*}}) {pipe.stage = 1 : i64}
// BAL: triad.layer transformer 1 backward ({{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer transformer 0 backward ({{.*}}) {pipe.stage = 0 : i64}
// BAL: triad.layer embedding 0 backward ({{.*}}) {pipe.stage = 0 : i64}
// The tied embedding: the head's part (stage 1) plus the embedding's (0).
// BAL: triad.add %{{.*}}, %{{.*}} {pipe.tied = array<i64: 0, 1>}

// MANUAL: pipe.stages = {{\[}}["embedding 0", "transformer 0"], ["transformer 1", "transformer 2", "head 0"]]

// Four stages on two ranks: stage s runs on rank s % 2.
// VIRTUAL: pipe.stages = {{\[}}["embedding 0", "transformer 0"], ["transformer 1"], ["transformer 2"], ["head 0"]]

// PP4: pipe.stages = {{\[}}["embedding 0", "transformer 0"], ["transformer 1"], ["transformer 2"], ["head 0"]]

// TOO-MANY: error: 'func.func' op cannot be cut into 8 pipeline stages (pp=8 x virtual-stages=1): it has only 5 layers (the embedding, the transformer layers and the head)
// COUNT: error: 'func.func' op stages=1,1 places 2 transformer layers, but the model has 3
// LIST: error: 'func.func' op stages=3 lists 1 stages, but pp x virtual-stages makes 2
// EMPTY: error: 'func.func' op stages=3,0,0 leaves stage 1 without a layer
// NUMBER: error: 'func.func' op stages=a,3: 'a' is not a count of transformer layers
// VIRTUAL0: error: virtual-stages=0 must be at least 1
// NO-STEP: error: needs @microbatch_step; run --triad-autodiff first
