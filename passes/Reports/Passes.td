//===- Passes.td - passes that report on the IR ------------*- tablegen -*-===//
//
// Passes that inspect the IR and print what a user needs to know before a
// launch; they never change the IR.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_REPORTS_PASSES_TD
#define TRIAD_PASSES_REPORTS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ModelSummary : Pass<"triad-model-summary", "::mlir::ModuleOp"> {
  let summary = "Prints the parameters and layer structure of a model";
  let description = [{
    Prints, for every function built of `triad.layer` parts, one line per
    part (embedding, transformer layer i, head) with the parameter elements
    it reads and the number of ops in it, then the totals: parameter count
    and bytes, parameters declared but never read. A parameter read by
    several parts (tied embeddings) counts once, in the first part that
    reads it. The IR is not changed.

    Example, for `triad-gen --preset tiny --layers 1`:

    ```
    model summary: @forward (3 parts, 1 transformer layers)
      part                       params    ops
      embedding 0                 20480      5
      transformer 0               49984     34
      head 0                        128      6
      total                       70592     45
      parameters: 70592 elements, 282368 bytes (f32: 70592)
    ```
  }];
  let dependentDialects = ["::triad::TriadDialect"];
}

#endif // TRIAD_PASSES_REPORTS_PASSES_TD
