//===- Passes.td - pipeline-parallel passes ----------------*- tablegen -*-===//
//
// Pipeline stages and their schedule (DESIGN.md section 4, pass 5).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_PIPELINE_PASSES_TD
#define TRIAD_PASSES_PIPELINE_PASSES_TD

include "mlir/Pass/PassBase.td"

def PipelineSplit : Pass<"triad-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Assigns the layers of the training step to pipeline stages";
  let description = [{
    Cuts the forward layers of `@microbatch_step` (the embedding, the
    transformer layers, the head, in order) into `pp * virtual-stages`
    contiguous stages; stage `s` runs on pipeline rank `s % pp`. Without
    `stages`, the cut minimizes the largest stage cost. A layer's cost is
    the sum over its ops of max(FLOPs, bytes x `flops-per-byte`), both from
    the ops' cost model (CostOpInterface): a roofline estimate in which an
    op is bound by compute or by memory traffic, whichever takes longer on
    a machine doing `flops-per-byte` operations per byte moved. The
    embedding and the head weigh in, and the counts may be uneven.
    `stages=8,8,8,6` gives the transformer layers per stage by hand (the
    embedding joins the first stage, the head the last); it must cover
    every layer once and leave no stage empty. No layer is ever dropped or
    duplicated.

    The result is recorded on the IR (the `pipe` dialect):
    - one `pipe.stage` per stage at module level: its layers, its pipeline
      rank, its forward FLOPs and bytes;
    - every top-level op of `@microbatch_step` gets the attribute
      `pipe.stage` (a layer's backward runs on the stage of its forward; a
      collective or constant on the stage of the values it reads or of its
      user);
    - a value one stage reads from another goes through a `pipe.transfer`
      (activations to the next stage, gradients to the previous one; any
      other crossing is an error);
    - the `triad.add` that sums a tied parameter's gradient parts from
      several stages (the input and output embedding) gets `pipe.tied`, the
      stages it sums over, instead: each stage accumulates its own part and
      the parts are summed across stages once per step.

    With `report=FILE` the `pipe.stage` ops are also written to FILE, one
    per line, so that a tool (triad-plan) reads the cut and its costs
    without printing the whole module.

    Example (pp=2, a model of 2 transformer layers):

    ```mlir
    pipe.stage 0 on rank 0 layers ["embedding 0", "transformer 0"] flops 12 bytes 34
    pipe.stage 1 on rank 1 layers ["transformer 1", "head 0"] flops 12 bytes 34
    func.func @microbatch_step(...) {
      %0 = triad.layer embedding 0 (%arg0) {pipe.stage = 0 : i64} ...
      %1 = triad.layer transformer 0 (%0) {pipe.stage = 0 : i64} ...
      %2 = pipe.transfer %1 from 0 to 1 : tensor<...>
      %3 = triad.layer transformer 1 (%2) {pipe.stage = 1 : i64} ...
      ...
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "Data-parallel ranks (when the "
           "module has no mesh yet)">,
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks (when the "
           "module has no mesh yet)">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline ranks (when the module has "
           "no mesh yet)">,
    Option<"order", "order", "std::string", "\"dp,pp,tp\"",
           "Mesh axes from the slowest to the fastest varying over "
           "consecutive ranks">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Stages per pipeline rank (the interleaved schedule)">,
    Option<"stages", "stages", "std::string", "\"\"",
           "Transformer layers per stage by hand, comma separated (default: "
           "balanced by cost)">,
    Option<"flopsPerByte", "flops-per-byte", "double", "10.0",
           "The balanced split's machine balance: operations per byte of "
           "memory traffic (about 10 for a CPU core, hundreds for a GPU)">,
    Option<"report", "report", "std::string", "\"\"",
           "Also write the stages, one `pipe.stage` op per line (layers, "
           "rank, FLOPs, bytes), to this file ('-': standard output)">,
  ];
  let statistics = [
    Statistic<"numStages", "stages", "Pipeline stages">,
  ];
  let dependentDialects = ["::triad::dist::DistDialect",
                           "::triad::pipe::PipeDialect"];
}

def PipelineSchedule : Pass<"triad-pipeline-schedule", "::mlir::ModuleOp"> {
  let summary = "Emits and verifies the per-rank pipeline schedule";
  let description = [{
    Builds the schedule of the stages `--triad-pipeline-split` made: for
    each pipeline rank, the ordered list of its actions (forward of
    microbatch i on stage s, backward, its input and weight halves for
    zero-bubble, send, receive, gradient reduction, optimizer), with
    `schedule=gpipe|1f1b|interleaved|zb-h1` over the step's microbatches
    (`triad.microbatches` on `@microbatch_step`). The schedule is checked
    statically: every send has its receive, each pass runs after its
    inputs arrive, and the whole runs to completion even when a send blocks
    until its receive is posted; a failing schedule is an error naming the
    first stuck action of each rank.

    A module that already has a `pipe.schedule` (written by hand) keeps it;
    its verifier checks it.

    The schedule is recorded as a `pipe.schedule` op:

    ```mlir
    pipe.schedule "1f1b" microbatches 2 virtual_stages 1 {
      pipe.rank 0 {
        pipe.forward stage 0 microbatch 0
        pipe.send activation stage 0 microbatch 0 to 1
        ...
      }
      pipe.rank 1 {
        pipe.recv activation stage 1 microbatch 0 from 0
        ...
    ```
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "gpipe, 1f1b, interleaved or zb-h1">,
  ];
  let dependentDialects = ["::triad::pipe::PipeDialect"];
}

def PipelineMaterialize
    : Pass<"triad-pipeline-materialize", "::mlir::ModuleOp"> {
  let summary = "Cuts the microbatch step into one function per stage and "
                "work";
  let description = [{
    Replaces `@microbatch_step`, whose ops `--triad-pipeline-split` gave
    stages, by the functions `--triad-pipeline-schedule`'s actions call,
    each once per microbatch: per stage s, `@forward_s<s>`,
    `@backward_s<s>` (or zero-bubble's `@backward_input_s<s>` and
    `@backward_weight_s<s>`), `@send_act_s<s>`, `@recv_act_s<s>`,
    `@send_grad_s<s>` and `@recv_grad_s<s>`, where the stage has such
    work. Each carries `pipe.stage` and `pipe.work`; layers are flattened
    into their ops.

    - A forward takes the data arguments its stage reads (always the
      labels, whose count weighs the microbatch), with their attributes.
    - A function returns the loss and the gradients (or a tied gradient's
      parts) it completes, with the step's result attributes; the lowering
      accumulates them.
    - A value one function makes and a later one of the same stage reads
      (an activation the backward needs, a received value, a value to
      send) is kept with `pipe.stash %v as N` and read back with
      `pipe.unstash N`; the lowering gives each kept value one copy per
      microbatch the stage holds in flight, so the plan does not grow with
      the number of microbatches.
    - Sends and receives list the `pipe.transfer` values in order
      (`pipe.send_tensor`, `pipe.recv_tensor`).

    Example (stage 1 of 2, 1F1B):

    ```mlir
    func.func @recv_act_s1() attributes {pipe.stage = 1 : i64,
        pipe.work = "recv_activation"} {
      %0 = pipe.recv_tensor from stage 0 : tensor<4x8x32xf32>
      pipe.stash %0 as 0 : tensor<4x8x32xf32>
      return
    }
    func.func @forward_s1(%labels: tensor<4x8xi32> {triad.input = "labels"})
        -> (tensor<f32> {triad.output = "loss"}) attributes {...} {
      %0 = pipe.unstash 0 : tensor<4x8x32xf32>
      ...
    ```
  }];
  let statistics = [
    Statistic<"numFunctions", "functions", "Stage functions made">,
    Statistic<"numStashed", "stashed", "Values kept from one function of a "
              "stage for a later one">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::triad::pipe::PipeDialect"];
}

#endif // TRIAD_PASSES_PIPELINE_PASSES_TD
