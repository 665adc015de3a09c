//===- RtOps.td - the rt dialect: per-rank runtime programs -*- tablegen -*-===//
//
// The `rt` dialect (L3) is the plan file in IR form: one flat program per
// pipeline rank, with every buffer at a static offset of one arena, the
// persistent tensors (parameters, optimizer state, accumulators), the
// functions the runtime calls and the order of the calls in one optimizer
// step. It maps 1:1 onto runtime/plan/plan.fbs; triad-translate
// --export-plan writes it out and the runtime's loader checks it again.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_RT_OPS_TD
#define TRIAD_DIALECT_RT_OPS_TD

include "dialects/Rt/RtBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "dialects/Triad/TriadBase.td"

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

def Rt_PlanOp : Rt_Op<"plan", [HasParent<"::mlir::ModuleOp">]> {
  let summary = "What every rank's program shares: the mesh and the data";
  let description = [{
    The mesh axes (names and sizes, in rank order: the last axis varies
    fastest across consecutive ranks) and the training data one optimizer
    step consumes: `batch` sequences of `seq` tokens from a vocabulary of
    `vocab`, in `microbatches` microbatches per data-parallel replica.
    `padded` is the vocabulary the compiler padded the output layer to,
    where it padded beyond a multiple of the "tp" axis
    (`--triad-train-pipeline=vocab-multiple=N`): embedding tables and logits
    may hold that many rows or columns. Without it they may hold the
    vocabulary rounded up to a multiple of tp.

    Example:

    ```mlir
    rt.plan mesh ["dp", "tp", "pp"] = [1, 1, 1] seq 64 vocab 256 batch 8 microbatches 1
    ```

    Under a pipeline (a "pp" axis above 1) it also names the schedule and
    its stages per pipeline rank; every program's `rt.step` lists its
    actions:

    ```mlir
    rt.plan mesh ["dp", "tp", "pp"] = [1, 1, 2] seq 64 vocab 256 batch 8 microbatches 4 schedule "1f1b" virtual_stages 1
    ```
  }];
  let arguments = (ins StrArrayAttr:$axes, DenseI64ArrayAttr:$axis_sizes,
                       I64Attr:$seq, I64Attr:$vocab, I64Attr:$batch,
                       I64Attr:$microbatches,
                       OptionalAttr<I64Attr>:$padded_vocab,
                       DefaultValuedAttr<TypedArrayAttrBase<StrArrayAttr,
                           "communicator groups">, "{}">:$groups,
                       OptionalAttr<StrAttr>:$schedule,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$virtual_stages);
  let assemblyFormat = [{
    `mesh` $axes `=` $axis_sizes `seq` $seq `vocab` $vocab
    (`padded` $padded_vocab^)? `batch` $batch
    `microbatches` $microbatches (`groups` $groups^)?
    (`schedule` $schedule^ `virtual_stages` $virtual_stages)? attr-dict
  }];
  let hasVerifier = 1;
}

def Rt_ProgramOp : Rt_Op<"program", [
    Symbol, SymbolTable, IsolatedFromAbove, SingleBlock, NoTerminator,
    HasParent<"::mlir::ModuleOp">]> {
  let summary = "The program of one pipeline rank";
  let description = [{
    Holds the rank's buffers, persistent tensors, functions and step. All
    buffers live in one arena of `arena_bytes` bytes.

    Example:

    ```mlir
    rt.program @rank0 pipeline_rank 0 arena 4096 {
      %w = rt.buffer 0 : memref<16x16xf32>
      rt.persistent "w" parameter %w global [16, 16] offsets [0, 0] init <zeros> : memref<16x16xf32>
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$pipeline_rank,
                       I64Attr:$arena_bytes);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `pipeline_rank` $pipeline_rank `arena` $arena_bytes
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Rt_BufferOp : Rt_Op<"buffer", [Pure, HasParent<"ProgramOp">]> {
  let summary = "A tensor at a static byte offset of the arena";
  let description = [{
    Names the bytes [offset, offset + size of the memref) of the program's
    arena as a tensor of the memref's element type and shape. Buffers may
    share bytes: the memory plan reuses them across values whose lifetimes
    do not overlap, and a reshaped value is another buffer at the same
    offset.

    A value a pipeline stage keeps from one of its calls to a later one (an
    activation its backward reads, a tensor it received or will send) has
    as many copies as the schedule keeps microbatches live in it at once:
    copy k starts `stride` * k bytes after `offset`, and a call of the step
    works on copy `slot mod slots` of every slotted buffer its function
    touches. So a stage's functions exist once whatever the number of
    microbatches.

    Example:

    ```mlir
    %x = rt.buffer 4096 : memref<8x64x64xf32>
    %act = rt.buffer 135168 slots 4 stride 131072 : memref<8x64x64xf32>
    ```
  }];
  let arguments = (ins I64Attr:$offset, OptionalAttr<I64Attr>:$slots,
                       OptionalAttr<I64Attr>:$stride);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = [{
    $offset (`slots` $slots^ `stride` $stride)? attr-dict `:` type($result)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Type":$type, "int64_t":$offset), [{
      build($_builder, $_state, type, offset, IntegerAttr(), IntegerAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// Bytes the buffer covers.
    int64_t getBytes();
    /// Its copies: 1 unless slotted.
    int64_t getSlotCount() { return getSlots().value_or(1); }
  }];
  let hasVerifier = 1;
}

def Rt_PersistentOp : Rt_Op<"persistent", [HasParent<"ProgramOp">]> {
  let summary = "A tensor kept between steps";
  let description = [{
    A parameter, a piece of optimizer state or an accumulator: its name (the
    checkpoint's and the init generator's), its buffer, the global shape of
    the tensor and the offsets of this rank's slice of it, and how it
    starts (the `triad` dialect's init attribute). A program serves every
    rank of its pipeline rank: `split` lists, per dimension, the mesh axes
    that split it, and a rank's slice starts at `offsets` plus its piece
    index times the local size in each split dimension.

    A tensor padded for tensor parallelism (a vocabulary padded to a
    multiple of tp) has a `padded` shape, which its pieces tile, beyond its
    global shape: elements outside the global shape are padding, zero at
    the start and never checkpointed. ZeRO's padded pieces (dp divides no
    dimension) are padding too: a dimension split over several axes is
    split by each in turn, the innermost taking pieces of ceil(piece / its
    size) of the piece the others leave, padded past its end.

    Its initial elements are drawn from the generator stream of its name,
    or of `stream`: an f32 master copy of a 16-bit parameter starts from
    the parameter's own draw (its `stream` is the parameter's name), so the
    two agree before the first step.

    Example:

    ```mlir
    rt.persistent "embed.wte" parameter %0 global [256, 64] offsets [0, 0] init <normal, std = 2.000000e-02> : memref<256x64xf32>
    rt.persistent "adam.m.w" state %1 global [64, 64] offsets [0, 0] split [["dp"], []] init <zeros> : memref<32x64xf32>
    rt.persistent "embed.wte" parameter %2 global [255, 64] padded [256, 64] offsets [0, 0] split [["tp"], []] init <normal, std = 2.000000e-02> : memref<128x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, Rt_Role:$role, Rt_Buffer:$buffer,
                       DenseI64ArrayAttr:$global_shape,
                       OptionalAttr<DenseI64ArrayAttr>:$padded_shape,
                       DenseI64ArrayAttr:$offsets,
                       DefaultValuedAttr<TypedArrayAttrBase<StrArrayAttr,
                           "split axes per dimension">, "{}">:$split,
                       Triad_InitAttr:$init,
                       OptionalAttr<StrAttr>:$stream);
  let assemblyFormat = [{
    $name $role $buffer `global` $global_shape (`padded` $padded_shape^)?
    `offsets` $offsets
    (`split` $split^)? `init` $init (`stream` $stream^)? attr-dict `:`
    type($buffer)
  }];
  let hasVerifier = 1;
}

def Rt_FuncOp : Rt_Op<"func", [
    Symbol, SingleBlock, NoTerminator, AttrSizedOperandSegments,
    HasParent<"ProgramOp">]> {
  let summary = "A function the runtime calls: arguments, results, kernels";
  let description = [{
    Before a call the runtime writes each argument (`arg_kinds`: `tokens` or
    `labels` of the call's microbatch, i32 [samples, seq], or the
    `prefix_lengths` of its samples, i32 [samples]); then the body's kernels
    run in order; then the results are read, each under its name.

    `layers` names the model layers the kernels come from, for traces and
    profiles: layer i spans the kernels [at[2i], at[2i + 1]) of the body,
    the spans in order and apart; kernels of no span belong to no layer.

    Example:

    ```mlir
    rt.func @microbatch_step args(%t, %l : memref<8x64xi32>, memref<8x64xi32>) kinds ["tokens", "labels"] results() names [] layers ["head 0"] at [0, 1] {
      rt.kernel count_valid(%l) -> (%n) ints [-100] : (memref<8x64xi32>) -> (memref<f32>)
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Variadic<Rt_Buffer>:$args,
                       StrArrayAttr:$arg_kinds, Variadic<Rt_Buffer>:$results,
                       StrArrayAttr:$result_names,
                       OptionalAttr<StrArrayAttr>:$layer_names,
                       OptionalAttr<DenseI64ArrayAttr>:$layer_spans);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `args` `(` ($args^ `:` type($args))? `)` `kinds` $arg_kinds
    `results` `(` ($results^ `:` type($results))? `)` `names` $result_names
    (`layers` $layer_names^ `at` $layer_spans)?
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def Rt_KernelOp : Rt_Op<"kernel", [AttrSizedOperandSegments,
                                   HasParent<"FuncOp">]> {
  let summary = "One runtime kernel call";
  let description = [{
    Calls kernel `opcode` on the input buffers, writing the output buffers,
    with its integer and float attributes (their meaning per kernel is in
    plan.fbs). Every kernel writes an output but `send`, which reads one
    buffer and transfers it to another pipeline rank (`recv` reads none and
    writes one). An output is the same buffer as an input only for the
    kernels that update in place (adamw, accumulate, scale_by, select, copy).

    Example:

    ```mlir
    rt.kernel matmul(%x, %w) -> (%y) ints [0, 0] : (memref<512x64xf32>, memref<64x64xf32>) -> (memref<512x64xf32>)
    ```
  }];
  let arguments = (ins Rt_OpCode:$opcode,
                       Arg<Variadic<Rt_Buffer>, "", [MemRead]>:$inputs,
                       Arg<Variadic<Rt_Buffer>, "", [MemWrite]>:$outputs,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$ints,
                       DefaultValuedAttr<DenseF64ArrayAttr, "{}">:$floats);
  let assemblyFormat = [{
    $opcode `(` $inputs `)` `->` `(` $outputs `)` (`ints` $ints^)?
    (`floats` $floats^)? attr-dict `:` functional-type($inputs, $outputs)
  }];
  let hasVerifier = 1;
}

def Rt_StepOp : Rt_Op<"step", [HasParent<"ProgramOp">]> {
  let summary = "The calls of one optimizer step, in order";
  let description = [{
    Each call names a function of the program and the microbatch its
    `tokens` and `labels` arguments read, and, where the program has
    slotted buffers, the slot (the copy of those buffers) it works on:
    without `slots`, every call works on slot 0.

    Example:

    ```mlir
    rt.step [@begin_step, @microbatch_step, @microbatch_step, @apply_step] microbatches [0, 0, 1, 0]
    ```

    Under a pipeline, `actions` is the pipeline rank's schedule (the
    runtime schedule's tokens, in order) and `at` gives, for every call,
    the index of the action it performs, or -1 for none (begin_step). The
    runtime checks the schedule again when it loads the plan, and that the
    calls follow it.

    ```mlir
    rt.step [@begin_step, @forward_s0, @send_act_s0, @forward_s0, ...]
        microbatches [0, 0, 0, 1, ...] slots [0, 0, 0, 1, ...]
        actions ["F0.0", "send-act0.0>1", "F0.1", ...] at [-1, 0, 1, 2, ...]
    ```
  }];
  let arguments = (ins TypedArrayAttrBase<FlatSymbolRefAttr, "function symbols">:$callees,
                       DenseI64ArrayAttr:$microbatches,
                       OptionalAttr<DenseI64ArrayAttr>:$slots,
                       OptionalAttr<StrArrayAttr>:$actions,
                       OptionalAttr<DenseI64ArrayAttr>:$call_actions);
  let assemblyFormat = [{
    $callees `microbatches` $microbatches (`slots` $slots^)?
    (`actions` $actions^ `at` $call_actions)? attr-dict
  }];
  let hasVerifier = 1;
}

#endif // TRIAD_DIALECT_RT_OPS_TD
