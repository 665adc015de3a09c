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

def ScheduleReport : Pass<"triad-schedule-report", "::mlir::ModuleOp"> {
  let summary = "Prints a pipeline schedule's per-rank actions, its check and "
                "its bubble";
  let description = [{
    Builds the pipeline schedule `schedule` (gpipe, 1f1b, interleaved,
    zb-h1; zero-bubble is zb-h1) for `pp` pipeline ranks, `microbatches`
    microbatches and `virtual-stages` stages per rank, checks it statically
    (every send has its receive, every pass has its inputs, and the ranks
    cannot deadlock with blocking point-to-point transfers) and prints:
    each rank's actions in order, the bubble fraction (idle over compute
    time) of a unit-cost run (a forward costs 1, a backward 2) next to the
    schedule's closed form, and the most microbatches whose activations
    each rank holds at once. After `--triad-train-pipeline`, the report is
    of the schedule the module was compiled for (its `rt.plan`); options
    given as well must agree with it. The IR is not changed. An invalid
    combination
    (interleaved with a number of microbatches that `pp` does not divide,
    virtual stages without interleaving) is an error that says why.

    Example (`--triad-schedule-report="pp=2 microbatches=4"`):

    ```
    triad schedule report: 1f1b, 2 pipeline ranks, 4 microbatches, 1 stage per rank
      rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 recv-grad0.0<1 B0.0 ...
      rank 1: recv-act1.0<0 F1.0 B1.0 send-grad1.0>0 ...
      check: every transfer matched, inputs before passes, no deadlock
      bubble (F=1, B=2): 0.2500 of compute time (closed form (p-1)/m: 0.2500)
      peak microbatches in flight per rank: 2 1
    ```

    Tokens: `Fs.i` / `Bs.i` forward / backward of stage s, microbatch i;
    `BIs.i` / `BWs.i` the input and weight halves of a split backward;
    `send-acts.i>r` / `recv-acts.i<r` an activation to / from rank r,
    `send-grads.i>r` / `recv-grads.i<r` a gradient.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1 "
           "(zero-bubble)">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline ranks">,
    Option<"microbatches", "microbatches", "int64_t", "1",
           "Microbatches per optimizer step">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Stages per pipeline rank (interleaved)">,
  ];
}

def CostReport : Pass<"triad-cost-report", "::mlir::ModuleOp"> {
  let summary = "Prints each layer's FLOPs, bytes, products and collectives "
                "from the ops' cost model";
  let description = [{
    For every function, one line per part (each `triad.layer`, forward and
    backward, and the ops outside layers) with the FLOPs and bytes of its
    ops (their CostOpInterface, the model the pipeline split balances
    stages by) and the bytes its collectives move. With `ops`, one line per
    op follows each part's: its FLOPs and bytes, and where it runs
    products on matrix units their shape (`batch` products of [m, k] by
    [k, n]; attention's batch is samples x heads, m the queries, n the keys
    and k the head size), by which a cost model sets its efficiency; a
    collective's bytes (the whole tensor: the reduced buffer, the gathered
    result, the input reduced and scattered), its mesh axes and the ranks
    of its group. Run after `--triad-partition` the shapes are a rank's and
    the collectives are there; `--triad-train-pipeline="cost-report=FILE"`
    writes it from there, as the planner (triad-plan) reads it. The IR is
    not changed. Output goes to stdout, or to `file`.

    With `fused-epilogues` (the default, as `--triad-lower-to-rt` fuses
    them), the bias add and activation that the lowering runs in a
    product's epilogue (EpilogueFusion.h) move no bytes of their own but
    their bias and the pre-activation the kernel keeps; their lines end in
    `fused`.

    Example (`triad-gen --preset tiny --layers 1`, after autodiff and the
    partition at tp 2, with `ops`):

    ```
    triad cost report: @microbatch_step
      transformer 0: 40 ops, 6684672 flops, 1071616 bytes, 2 collectives of 131072 bytes
        triad.matmul flops=1572864 bytes=139264 product batch=1 m=512 n=96 k=16
        ...
        dist.all_reduce bytes=65536 over [tp] ranks=2
    ```
  }];
  let options = [
    Option<"file", "file", "std::string", "\"-\"",
           "Where to write the report ('-': stdout)">,
    Option<"ops", "ops", "bool", "false",
           "List every op of every part, not only the parts' totals">,
    Option<"fusedEpilogues", "fused-epilogues", "bool", "true",
           "Count the bias adds and activations the lowering fuses into "
           "their products' epilogues as the fused kernel moves them">,
  ];
  let dependentDialects = ["::triad::TriadDialect"];
}

#endif // TRIAD_PASSES_REPORTS_PASSES_TD
