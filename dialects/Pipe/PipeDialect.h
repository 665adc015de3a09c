//===- PipeDialect.h - pipeline stages and schedules ------------*- C++ -*-===//
//
// Declares the `pipe` dialect (L2): pipeline stages, the values crossing
// between them and the per-rank schedule of actions.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_PIPE_PIPEDIALECT_H
#define TRIAD_DIALECTS_PIPE_PIPEDIALECT_H

#include "runtime/schedule/Schedule.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Pipe/PipeDialect.h.inc"
#include "dialects/Pipe/PipeEnums.h.inc"
#include "dialects/Pipe/PipeInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Pipe/PipeOps.h.inc"

namespace triad::pipe {

/// The runtime's send (or receive) action of stage `stage`, microbatch
/// `microbatch`, with pipeline rank `peer`; the other end's stage follows
/// from the direction (activations flow to s + 1, gradients to s - 1).
schedule::Action transferAction(bool send, Direction direction, int stage,
                                int microbatch, int peer);

/// Builds the op of `action` at the builder's insertion point.
mlir::Operation *buildAction(mlir::OpBuilder &builder, mlir::Location loc,
                             const schedule::Action &action);

/// The stage function that runs `action` (none: the action is no stage's
/// work, as the gradient reduction and the optimizer are).
std::optional<StageWork> stageWorkOf(const schedule::Action &action);

/// The name of stage `stage`'s function for `work`: "forward_s0",
/// "backward_input_s2", "send_act_s3", "recv_grad_s1", ...
std::string stageFunctionName(StageWork work, int64_t stage);

/// The stage and work of a stage function (its `pipe.stage` and
/// `pipe.work`), or none.
std::optional<std::pair<int64_t, StageWork>>
stageFunctionOf(mlir::Operation *function);

/// The module's pipe.schedule, read back and verified; an error at the
/// module when it has none or several.
mlir::FailureOr<schedule::Schedule> readSchedule(mlir::ModuleOp module);

} // namespace triad::pipe

#endif // TRIAD_DIALECTS_PIPE_PIPEDIALECT_H
