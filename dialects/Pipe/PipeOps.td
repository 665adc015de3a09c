//===- PipeOps.td - the pipe dialect: stages, transfers, schedules -*- tablegen -*-===//
//
// The `pipe` dialect (L2): the pipeline stages of a training step (their
// layers, their pipeline rank, their cost), the values that cross from one
// stage to the next, and the schedule: the ordered list of actions of every
// pipeline rank.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_PIPE_OPS_TD
#define TRIAD_DIALECT_PIPE_OPS_TD

include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Pipe_Dialect : Dialect {
  let name = "pipe";
  let cppNamespace = "::triad::pipe";
  let summary = "Pipeline stages, stage transfers and schedules";
  let description = [{
    `--triad-pipeline-split` cuts the forward layers of the microbatch step
    into stages: one `pipe.stage` per stage at module level, the discardable
    attribute `pipe.stage` on every top-level op of the step (the stage that
    runs it), `pipe.tied` on the sum of a tied parameter's gradient parts
    (the stages that compute them) and a `pipe.transfer` wherever a value
    crosses from one stage to an adjacent one. `--triad-pipeline-schedule`
    adds the `pipe.schedule`: one `pipe.rank` per pipeline rank with its
    actions in order. The schedule's verifier is the static deadlock check.
    `--triad-pipeline-materialize` then cuts the step into stage functions
    (`pipe.stage` and `pipe.work` on a `func.func`), each called once per
    microbatch, whose kept values (`pipe.stash`, `pipe.unstash`) and
    transfers (`pipe.send_tensor`, `pipe.recv_tensor`) are explicit.
  }];
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The stage of a top-level op of the microbatch step (i64).
    static constexpr ::llvm::StringLiteral kStageAttrName = "pipe.stage";
    /// On the sum of a tied parameter's gradient parts: the stages that
    /// compute the parts (ascending i64 array).
    static constexpr ::llvm::StringLiteral kTiedAttrName = "pipe.tied";
    /// On a stage function (--triad-pipeline-materialize): the work it does
    /// for one microbatch (a StageWork name); the function also carries
    /// `pipe.stage`.
    static constexpr ::llvm::StringLiteral kWorkAttrName = "pipe.work";
  }];
}

class Pipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pipe_Dialect, mnemonic, traits>;

def Pipe_Direction : I32EnumAttr<"Direction", "what a transfer moves", [
  I32EnumAttrCase<"activation", 0>,
  I32EnumAttrCase<"gradient", 1>
]> {
  let cppNamespace = "::triad::pipe";
}

def Pipe_StageWork : I32EnumAttr<"StageWork",
    "the work of a stage function for one microbatch", [
  I32EnumAttrCase<"forward", 0>,
  I32EnumAttrCase<"backward", 1>,
  I32EnumAttrCase<"backward_input", 2>,
  I32EnumAttrCase<"backward_weight", 3>,
  I32EnumAttrCase<"send_activation", 4>,
  I32EnumAttrCase<"recv_activation", 5>,
  I32EnumAttrCase<"send_gradient", 6>,
  I32EnumAttrCase<"recv_gradient", 7>
]> {
  let cppNamespace = "::triad::pipe";
}

def Pipe_ActionOpInterface : OpInterface<"ActionOpInterface"> {
  let cppNamespace = "::triad::pipe";
  let description = [{
    An action of a pipeline rank's schedule: the op stands for one entry of
    the runtime's schedule (runtime/schedule/Schedule.h), which builds,
    checks and simulates schedules.
  }];
  let methods = [
    InterfaceMethod<"The schedule action this op stands for.",
      "::triad::schedule::Action", "getAction">
  ];
}

defvar Pipe_NonNegative = ConfinedAttr<I64Attr, [IntNonNegative]>;

//===----------------------------------------------------------------------===//
// Stages and transfers
//===----------------------------------------------------------------------===//

def Pipe_StageOp : Pipe_Op<"stage", [HasParent<"::mlir::ModuleOp">]> {
  let summary = "A pipeline stage: its layers, its pipeline rank, its cost";
  let description = [{
    Stage `index` holds the forward layers `layers` (in order, named
    "<kind> <index>") and their backward; it runs on pipeline rank `rank`
    (stage s on rank s mod pp: several stages per rank make the interleaved
    schedule's virtual stages). `flops` and `bytes` are the forward pass's
    estimate from the IR (the cost model of the triad ops), which the
    balanced split evens out.

    Example:

    ```mlir
    pipe.stage 1 on rank 1 layers ["transformer 2", "head 0"] flops 1524321 bytes 96420
    ```
  }];
  let arguments = (ins Pipe_NonNegative:$index, Pipe_NonNegative:$rank,
                       StrArrayAttr:$layers, Pipe_NonNegative:$flops,
                       Pipe_NonNegative:$bytes);
  let assemblyFormat = [{
    $index `on` `rank` $rank `layers` $layers `flops` $flops `bytes` $bytes
    attr-dict
  }];
  let hasVerifier = 1;
}

def Pipe_TransferOp : Pipe_Op<"transfer", [
    Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "A value crossing from one pipeline stage to the next";
  let description = [{
    The value `input`, computed on stage `from`, as stage `to` reads it: an
    activation moving forward (`to` = `from` + 1) or a gradient moving back
    (`to` = `from` - 1). `--triad-pipeline-materialize` turns it into a
    send in `from`'s send function and a receive in `to`'s receive
    function, which the schedule's transfer actions call.

    Example:

    ```mlir
    %1 = pipe.transfer %0 from 0 to 1 : tensor<4x8x32xf32>
    ```
  }];
  let arguments = (ins AnyType:$input, Pipe_NonNegative:$from,
                       Pipe_NonNegative:$to);
  let results = (outs AnyType:$result);
  let assemblyFormat = [{
    $input `from` $from `to` $to attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Stage functions (--triad-pipeline-materialize)
//===----------------------------------------------------------------------===//

def Pipe_StashOp : Pipe_Op<"stash"> {
  let summary = "Keeps a value for a later function of the same stage";
  let description = [{
    In a stage function (a `func.func` with `pipe.stage` and `pipe.work`):
    keeps `value` under `index` for the stage's later functions of the same
    microbatch (its forward keeps the activations its backward reads, a
    receive keeps what it received, a pass keeps what a send sends). The
    lowering gives each kept value one copy per microbatch the stage holds
    in flight at once, not one per microbatch.

    Example:
    ```mlir
    pipe.stash %5 as 0 : tensor<4x8x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Pipe_NonNegative:$index);
  let assemblyFormat = "$value `as` $index attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Pipe_UnstashOp : Pipe_Op<"unstash"> {
  let summary = "Reads a value an earlier function of the stage kept";
  let description = [{
    In a stage function: the value an earlier function of the same stage
    and microbatch kept under `index` (`pipe.stash`).

    Example:
    ```mlir
    %0 = pipe.unstash 0 : tensor<4x8x32xf32>
    ```
  }];
  let arguments = (ins Pipe_NonNegative:$index);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$index attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Pipe_SendTensorOp : Pipe_Op<"send_tensor"> {
  let summary = "Sends a value to an adjacent stage";
  let description = [{
    In a send function of stage s: sends `value` to stage `stage` (s + 1
    for an activation, s - 1 for a gradient), on the rank that runs it. The
    receiving stage's receive function lists the same values in the same
    order (`pipe.recv_tensor`).

    Example:
    ```mlir
    pipe.send_tensor %0 to stage 1 : tensor<4x8x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Pipe_NonNegative:$stage);
  let assemblyFormat = "$value `to` `stage` $stage attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Pipe_RecvTensorOp : Pipe_Op<"recv_tensor"> {
  let summary = "Receives a value from an adjacent stage";
  let description = [{
    In a receive function of stage s: the next value stage `stage` sends it
    (s - 1 for an activation, s + 1 for a gradient).

    Example:
    ```mlir
    %0 = pipe.recv_tensor from stage 0 : tensor<4x8x32xf32>
    ```
  }];
  let arguments = (ins Pipe_NonNegative:$stage);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "`from` `stage` $stage attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

def Pipe_ScheduleOp : Pipe_Op<"schedule", [
    HasParent<"::mlir::ModuleOp">, SingleBlock, NoTerminator]> {
  let summary = "The pipeline schedule: every pipeline rank's actions";
  let description = [{
    One `pipe.rank` per pipeline rank, in rank order, each listing the
    rank's actions in the order they run. `name` is the schedule's
    (gpipe, 1f1b, interleaved, zb-h1, or any name for a hand-written one);
    stage s runs on rank s mod (number of ranks).

    The verifier is the static check of DESIGN.md section 4, pass 5: every
    action in range and on its stage's rank, every pass after its inputs,
    each (stage, microbatch) run forward and backward once, every send
    matched by one receive, and the whole schedule completing when sends
    and receives both block until their match (rendezvous). A schedule
    that deadlocks is an error naming the first stuck action of each rank.

    Example:

    ```mlir
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
        ...
      }
    }
    ```
  }];
  let arguments = (ins StrAttr:$name, ConfinedAttr<I64Attr, [IntPositive]>:$microbatches,
                       ConfinedAttr<I64Attr, [IntPositive]>:$virtual_stages);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $name `microbatches` $microbatches `virtual_stages` $virtual_stages
    attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The schedule in the runtime's form (unchecked).
    ::triad::schedule::Schedule getSchedule();
    /// Appends a pipe.schedule for `schedule` at the builder's insertion
    /// point.
    static ScheduleOp createFrom(::mlir::OpBuilder &builder,
                             ::mlir::Location loc,
                             const ::triad::schedule::Schedule &schedule);
  }];
}

def Pipe_RankOp : Pipe_Op<"rank", [
    HasParent<"ScheduleOp">, SingleBlock, NoTerminator]> {
  let summary = "The actions of one pipeline rank, in order";
  let arguments = (ins Pipe_NonNegative:$rank);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$rank attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

class Pipe_ActionOp<string mnemonic, list<Trait> traits = []>
    : Pipe_Op<mnemonic, !listconcat(traits, [HasParent<"RankOp">,
        DeclareOpInterfaceMethods<Pipe_ActionOpInterface>])>;

// A pass of stage `stage` over microbatch `microbatch`.
class Pipe_PassOp<string mnemonic, string kind, string what>
    : Pipe_ActionOp<mnemonic> {
  let summary = what;
  let arguments = (ins Pipe_NonNegative:$stage, Pipe_NonNegative:$microbatch);
  let assemblyFormat = "`stage` $stage `microbatch` $microbatch attr-dict";
  let extraClassDefinition = [{
    ::triad::schedule::Action $cppClass::getAction() {
      return ::triad::schedule::Action::compute(
          ::triad::schedule::ActionKind::}] # kind # [{,
          static_cast<int>(getStage()), static_cast<int>(getMicrobatch()));
    }
  }];
}

def Pipe_ForwardOp : Pipe_PassOp<"forward", "Forward",
    "The forward pass of a stage over a microbatch">;
def Pipe_BackwardOp : Pipe_PassOp<"backward", "Backward",
    "The whole backward pass of a stage over a microbatch">;
def Pipe_BackwardInputOp : Pipe_PassOp<"backward_input", "BackwardInput",
    "Zero-bubble: the input-gradient part of a stage's backward pass">;
def Pipe_BackwardWeightOp : Pipe_PassOp<"backward_weight", "BackwardWeight",
    "Zero-bubble: the weight-gradient part of a stage's backward pass">;

// A point-to-point transfer of stage `stage`'s values of one microbatch.
class Pipe_TransferActionOp<string mnemonic, string send, string peerWord,
                            string what>
    : Pipe_ActionOp<mnemonic> {
  let summary = what;
  let arguments = (ins Pipe_Direction:$direction, Pipe_NonNegative:$stage,
                       Pipe_NonNegative:$microbatch, Pipe_NonNegative:$peer);
  let assemblyFormat = "$direction `stage` $stage `microbatch` $microbatch `"
                       # peerWord # "` $peer attr-dict";
  let extraClassDefinition = [{
    ::triad::schedule::Action $cppClass::getAction() {
      return ::triad::pipe::transferAction(}] # send # [{, getDirection(),
          static_cast<int>(getStage()), static_cast<int>(getMicrobatch()),
          static_cast<int>(getPeer()));
    }
  }];
}

def Pipe_SendOp : Pipe_TransferActionOp<"send", "true", "to", [{
    Sends what stage `stage` computed for microbatch `microbatch` (its
    activations to the next stage, or its input gradients to the previous
    one) to pipeline rank `peer`}]>;
def Pipe_RecvOp : Pipe_TransferActionOp<"recv", "false", "from", [{
    Receives what stage `stage` reads for microbatch `microbatch` from
    pipeline rank `peer`}]>;

def Pipe_ReduceGradientsOp : Pipe_ActionOp<"reduce_gradients"> {
  let summary = "The step's gradient reductions over the other mesh axes";
  let assemblyFormat = "attr-dict";
  let extraClassDefinition = [{
    ::triad::schedule::Action $cppClass::getAction() {
      return ::triad::schedule::Action::local(
          ::triad::schedule::ActionKind::ReduceGradients);
    }
  }];
}

def Pipe_OptimizerOp : Pipe_ActionOp<"optimizer"> {
  let summary = "The optimizer update of the rank's parameters";
  let assemblyFormat = "attr-dict";
  let extraClassDefinition = [{
    ::triad::schedule::Action $cppClass::getAction() {
      return ::triad::schedule::Action::local(
          ::triad::schedule::ActionKind::Optimizer);
    }
  }];
}

#endif // TRIAD_DIALECT_PIPE_OPS_TD
