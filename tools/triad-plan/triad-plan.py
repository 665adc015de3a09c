#!/usr/bin/env python3
"""triad-plan: chooses a parallel configuration for a model and a cluster.

Searches data, tensor and pipeline parallelism (dp x tp x pp, tensor
parallelism inside a node), the ZeRO stage, the microbatch size, the
pipeline schedule (1F1B, ZB-H1, interleaved with 2 or 4 virtual stages,
GPipe), sequence parallelism and activation recomputation for a model (a
triad-gen preset, a Hugging Face config, or explicit sizes) on a cluster of
GPUs from a table (A100 40 and 80 GB, H100 SXM, H200), drops every
configuration that does not fit in memory, predicts the step time of the
rest and prints them ranked, with the --triad-train-pipeline options of
each.

Memory is the compiler's. Each pipeline rank's arena (its parameters,
optimizer state, gradient accumulators, the activations its stages keep
between calls, and the temporaries the lowering places) is predicted from
a few calibration compiles of the model cut short, one or two per class of
configuration (tp, sp, recomputation, ZeRO stage, microbatch size, with or
without a pipeline, ZB-H1 or not), with the compiler's own cut of the
layers into stages and its own count of the copies each kept storage needs
on the schedule (CompiledMemory); test/tools/triad-plan/memory.py holds the
predictions to the compiled plans within 2% on every seed model. The
search ranks the configurations by time, then checks memory in that order
until enough fit. With --implementation megatron-2021 (or --memory-by
closed-form) memory is a closed form instead.

Time is the compiler's too, op by op. The model cut to one layer is
compiled per tp, sp and microbatch size (CompiledCosts) and its cost
report (--triad-cost-report: the ops of each layer's forward and backward
as a rank runs them, with their FLOPs, bytes and product shapes from the
ops' CostOpInterface, and the collectives between them) timed by a
roofline: a product's FLOPs at the peak times an efficiency by its shape
(75% for wide products, half that where its narrowest side, m, n or k, is
128), fused attention's by its head size and sequence (half at a head of
32 or a sequence of 256), every other op's bytes at the memory bandwidth,
whichever is longer; tensor parallelism's collectives as the compiler put
them, by the alpha-beta model below; recomputation adds the forward ops
it repeats. test/tools/triad-plan/costs.py holds the reports the planner
draws to the compiled ones. Where triad-gen cannot build the model (or
with --time-by closed-form) the compute time is the closed form below.
The closed forms, per GPU:

  memory   model state by the ZeRO paper: 16-bit parameters, summed
           gradients in f32 (or 16 bits with --grad-accumulation param),
           f32 master weights and Adam moments (2 + 4 + 12 bytes a
           parameter; f32 models 4 + 4 + 8); ZeRO-1 shards the optimizer
           state over dp, ZeRO-2 the gradients too, ZeRO-3 everything.
           Activations by Korthikanti et al. 2022 per layer and microbatch
           in 16 bits: s b h (10 + 24/t), s b h 34/t with sequence
           parallelism, s b h 2 with full recomputation; Triad regenerates
           its dropout masks (2 s b h less) and fuses attention, Megatron-LM
           2021 keeps the scores (5 a s^2 b / t more); times the
           microbatches the first pipeline stage keeps (pp for 1F1B, more
           for interleaved, all for GPipe).
  compute  the FLOPs of each pass (2 per layer parameter and token, 4 s h
           per token and layer in attention) at the GPU's dense peak times
           a product efficiency (75%, less for products narrower than a
           few hundred per GPU); the backward is twice the forward; full
           recomputation adds a forward, selective attention's. Element-
           wise work moves its bytes at the memory bandwidth: norms and
           residual adds on whole rows on every tensor-parallel rank (22 h
           bytes per token and layer), biases and activations on a rank's
           share (28 h / t), all of it shared with sequence parallelism;
           unfused attention its scores (12 a s).
  comm     ring collectives, alpha-beta: 2 (n - 1) steps for an
           all-reduce, n - 1 for an all-gather or a reduce-scatter, each a
           latency plus 1 / n of the bytes at the bus bandwidth (every
           all-reduce by the ring or NCCL's double binary tree, whichever
           is faster), over NVLink
           inside a node and InfiniBand across nodes: tensor parallelism's 2
           all-reduces per layer and pass (not overlapped), the pipeline's
           activations and gradients between stages, data parallelism's
           collectives once per step (per microbatch for ZeRO-2 and -3,
           whose reduce-scatters overlap the rest of the microbatch's
           backward on the stage, as Triad places them; ZeRO-0's
           all-reduces overlap the backward of the stage's last microbatch
           alike).
  pipeline the bubble: (pp - 1) stage times for 1F1B and GPipe, 1 / v of
           that for the interleaved schedule, a third for ZB-H1; then the
           best 10 (--simulate N) and --explain are re-timed on the compiler's
           own schedule (--triad-schedule-report, the runtime's builder),
           action by action: each rank runs its forwards, backwards (input
           and weight gradients apart for ZB-H1) and transfers in order, a
           receive waiting for its send.

The constants (product efficiency, bandwidths, latencies) were set against
Narayanan et al. 2021's ten published runs (test/tools/triad-plan). These
are the physics of the choice.

  triad-plan --preset gpt-neox-20b --gpu a100-40gb --nodes 12 --batch 1536
  triad-plan --layers 24 --hidden 2304 --heads 24 --seq 2048 --vocab 51200 \\
      --gpu a100-80gb --nodes 4 --batch 512 --implementation megatron-2021 \\
      --explain "dp=32 tp=1 pp=1 microbatch=1 recompute=full"
"""

import argparse
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# Dense 16-bit and f32 (no TF32) peaks in TFLOP/s, memory in GiB, memory
# bandwidth in GB/s, and NVLink bus bandwidth per GPU in GB/s as
# nccl-tests report it for large all-reduces (below the links' rate).
GPUS = {
    "a100-40gb": {"bf16": 312, "f32": 19.5, "memory": 40, "hbm": 1555,
                  "nvlink": 235},
    "a100-80gb": {"bf16": 312, "f32": 19.5, "memory": 80, "hbm": 2039,
                  "nvlink": 235},
    "h100-sxm": {"bf16": 989, "f32": 67, "memory": 80, "hbm": 3350,
                 "nvlink": 360},
    "h200": {"bf16": 989, "f32": 67, "memory": 141, "hbm": 4800,
             "nvlink": 360},
}

# Schedules and their virtual stages per pipeline rank.
SCHEDULES = (("1f1b", 1), ("zb-h1", 1), ("interleaved", 2),
             ("interleaved", 4), ("gpipe", 1))
RECOMPUTE = ("none", "selective", "full")

# Matrix products reach this share of the dense peak when they are wide;
# one whose narrowest side is PRODUCT_HALF per GPU reaches half of it.
PRODUCT_EFFICIENCY = 0.75
PRODUCT_HALF = 128
# Fused attention (FlashAttention-2's kernels, Triad's and cuDNN's alike)
# reaches less than the layers' products: its products are only a head
# deep and every block of queries walks all the keys. A head of
# ATTENTION_HALF_HEAD or a sequence of ATTENTION_HALF_SEQ halves its rate
# (at 128 and 2048: 0.53 of the peak, within the 50-73% the FlashAttention-2
# paper reports for its forward pass on an A100).
ATTENTION_HALF_HEAD = 32
ATTENTION_HALF_SEQ = 256
# Bytes of element-wise traffic per token and layer in a forward pass, in
# units of the hidden size, each op reading and writing 16-bit rows: the
# two norms (4 h each) and the two bias-dropout-residual adds (7 h each)
# run on whole rows on every tensor-parallel rank, the query/key/value
# bias (12 h) and the MLP's bias and activation (16 h) on a rank's share;
# with sequence parallelism every one of them on a share. Unfused
# attention also writes and reads its scores and probabilities (with
# dropout), in units of heads x sequence.
ELEMENTWISE_WHOLE = 22
ELEMENTWISE_SHARED = 28
UNFUSED_SCORE_BYTES = 12
# Latency of one step of a ring collective inside a node and across nodes
# (s): a ring all-reduce over n ranks takes 2 (n - 1) steps.
LATENCY_NVLINK = 8e-6
LATENCY_IB = 12e-6
# Memory the framework and the CUDA context keep besides the tensors.
RESERVED_GIB = 2.0


def fail(message):
    print(f"triad-plan: error: {message}", file=sys.stderr)
    sys.exit(1)


def find_triad_gen():
    """triad-gen beside triad-plan or on PATH, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "triad-gen"), shutil.which("triad-gen")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def triad_opt():
    """triad-opt, beside triad-gen."""
    return os.path.join(os.path.dirname(triad_gen()), "triad-opt")


def generated_model(setup, path, batch, dtype, layers=None):
    """The model's IR as triad-gen builds it, written to `path` once (with
    `layers` transformer layers instead of the model's, if given)."""
    if os.path.exists(path):
        return
    made = subprocess.run(
        [triad_gen(), *setup.model["generator"],
         *(["--layers", str(layers)] if layers else []), "--batch",
         str(batch), "--dtype", dtype, "-o", path],
        capture_output=True, text=True)
    if made.returncode != 0:
        fail(made.stderr.strip() or "triad-gen failed")


def triad_gen():
    if find_triad_gen():
        return find_triad_gen()
    fail("triad-gen not found beside triad-plan or on PATH (needed for "
         "--preset and --hf-config; or give --layers, --hidden, --heads, "
         "--seq and --vocab)")


def model_from_generator(args):
    """The sizes of a preset or Hugging Face config, as triad-gen builds it."""
    source = ["--preset", args.preset] if args.preset else \
        ["--hf-config", args.hf_config]
    overrides = []
    for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn"):
        if getattr(args, name):
            overrides += [f"--{name}", str(getattr(args, name))]
    counts = subprocess.run([triad_gen()] + source + overrides +
                            ["--print-params"], capture_output=True,
                            text=True)
    if counts.returncode != 0:
        fail(counts.stderr.strip() or "triad-gen failed")
    text = counts.stdout
    total = int(re.search(r"parameters: (\d+)", text).group(1))
    embedding = int(re.search(r"embedding\s+(\d+)", text).group(1))
    layers, per_layer = map(int, re.search(
        r"layers\s+\d+\s+\((\d+) x (\d+)\)", text).groups())
    # One layer's IR for the widths.
    ir = subprocess.run([triad_gen()] + source + overrides + ["--layers", "1"],
                        capture_output=True, text=True)
    if ir.returncode != 0:
        fail(ir.stderr.strip() or "triad-gen failed")
    vocab, hidden = map(int, re.search(
        r"triad\.param @embed\.wte : tensor<(\d+)x(\d+)x", ir.stdout).groups())
    seq = int(re.search(r"func\.func @forward\(%arg0: tensor<\d+x(\d+)xi32>",
                        ir.stdout).group(1))
    # The attention's heads, and its key/value heads (fewer with
    # grouped-query attention), which tensor parallelism must divide too.
    attention = re.search(r"triad\.attention .*? heads = (\d+)"
                          r"(?: kv_heads = (\d+))?", ir.stdout)
    heads = int(attention.group(1))
    kv_heads = int(attention.group(2) or heads)
    # A learned position table stays whole on every tensor-parallel rank.
    positions = re.search(r"triad\.param @embed\.wpe : tensor<(\d+)x(\d+)x",
                          ir.stdout)
    whole = int(positions.group(1)) * int(positions.group(2)) if positions \
        else 0
    return {"name": args.preset or os.path.basename(args.hf_config),
            "layers": layers, "hidden": hidden, "heads": heads,
            "kv_heads": kv_heads, "seq": seq,
            "vocab": vocab, "per_layer": per_layer, "params": total,
            "embedding": embedding, "whole": whole,
            "generator": source + overrides}


def model_from_sizes(args):
    """A GPT of the given sizes (4 h MLP, learned positions, biases)."""
    for name in ("layers", "hidden", "heads", "seq", "vocab"):
        if not getattr(args, name):
            fail(f"--{name} is needed without --preset or --hf-config")
    h, ffn = args.hidden, args.ffn or 4 * args.hidden
    per_layer = 4 * h * h + 2 * h * ffn + 9 * h + ffn
    embedding = args.vocab * h + args.seq * h
    params = args.layers * per_layer + embedding + 2 * h
    model = {"name": "custom", "layers": args.layers, "hidden": h,
             "heads": args.heads, "seq": args.seq, "vocab": args.vocab,
             "per_layer": per_layer, "params": params,
             "embedding": embedding, "whole": args.seq * h}
    # triad-gen builds it from GPT-2's preset, for the compiler's memory.
    if find_triad_gen():
        model["generator"] = [
            "--preset", "gpt2-small", "--layers", str(args.layers),
            "--hidden", str(h), "--heads", str(args.heads), "--seq",
            str(args.seq), "--vocab", str(args.vocab), "--ffn", str(ffn)]
    return model


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


DEVICE_FIELDS = {"name": str, "bf16": float, "f32": float, "memory": float,
                 "hbm": float, "nvlink": float}


def load_device(path):
    """A device measured elsewhere (bench/plan_vs_cpu.py writes this CPU's):
    the GPUS fields, plus optionally `latency` (s per ring step),
    `product_efficiency` (of the peaks given), `product_half` (the width
    at which products reach half of that; 0: no fall-off),
    `attention_efficiency` (attention's products against the layers') and
    `cores` (ranks past it share the cores)."""
    try:
        with open(path) as f:
            device = json.load(f)
    except (OSError, ValueError) as error:
        fail(f"--device {path}: {error}")
    for field, kind in DEVICE_FIELDS.items():
        if not isinstance(device.get(field), (kind, int) if kind is float
                          else kind):
            fail(f"--device {path}: '{field}' is missing or not a "
                 f"{'number' if kind is float else 'string'}")
    return device


class Cluster:
    def __init__(self, args):
        if args.device:
            self.gpu = load_device(args.device)
            self.name = self.gpu["name"]
        elif args.gpu not in GPUS:
            fail(f"unknown --gpu '{args.gpu}' (one of {', '.join(GPUS)})")
        else:
            self.gpu = GPUS[args.gpu]
            self.name = args.gpu
        self.per_node = args.gpus_per_node
        self.nodes = args.nodes
        self.count = self.per_node * self.nodes
        # Ranks past a device's cores share them (see evaluate).
        self.cores = self.gpu.get("cores", self.count)
        self.nvlink = (args.nvlink or self.gpu["nvlink"]) * 1e9
        self.ib = args.ib * 1e9
        self.memory = (args.memory or self.gpu["memory"]) * 2**30
        self.peak = self.gpu["bf16"] * 1e12
        self.f32_peak = self.gpu["f32"] * 1e12
        self.hbm = self.gpu["hbm"] * 1e9
        self.efficiency = self.gpu.get("product_efficiency",
                                       PRODUCT_EFFICIENCY)
        self.product_half = self.gpu.get("product_half", PRODUCT_HALF)
        self.attention_efficiency = self.gpu.get("attention_efficiency", 1.0)
        self.attention_half_head = self.gpu.get("attention_half_head",
                                                ATTENTION_HALF_HEAD)
        self.attention_half_seq = self.gpu.get("attention_half_seq",
                                               ATTENTION_HALF_SEQ)
        self.latency = self.gpu.get("latency", LATENCY_NVLINK)


def ring_seconds(bytes_, ranks, bandwidth, latency, factor):
    """A ring collective of factor (n - 1) steps (2 for an all-reduce, 1 for
    an all-gather or a reduce-scatter), each moving 1 / n of the bytes at
    the bus bandwidth after a latency: alpha-beta."""
    if ranks <= 1 or bytes_ == 0:
        return 0.0
    steps = factor * (ranks - 1)
    return steps * (latency + bytes_ / ranks / bandwidth)


def all_reduce_seconds(bytes_, ranks, bandwidth, latency):
    """An all-reduce by the faster of NCCL's two algorithms: the ring
    (2 (n - 1) steps) or the double binary tree, which moves the bytes
    twice at the bus bandwidth, pipelined in chunks, with 2 log2(n) steps'
    latency: the tree wins for small messages on many ranks."""
    if ranks <= 1 or bytes_ == 0:
        return 0.0
    ring = ring_seconds(bytes_, ranks, bandwidth, latency, 2)
    tree = 2 * bytes_ / bandwidth + 2 * math.ceil(math.log2(ranks)) * latency
    return min(ring, tree)


def product_efficiency(width, best=PRODUCT_EFFICIENCY, half=PRODUCT_HALF):
    return best * width / (width + half)


SCHEDULE_CACHE = {}


def schedule_actions(schedule, pp, m, v):
    """Each pipeline rank's actions in the order the runtime runs them, from
    the compiler's --triad-schedule-report (the runtime's own schedule
    builder)."""
    key = (schedule, pp, m, v)
    if key not in SCHEDULE_CACHE:
        options = f"schedule={schedule} pp={pp} microbatches={m}"
        if v > 1:
            options += f" virtual-stages={v}"
        done = subprocess.run(
            [triad_opt(), "-", f"--triad-schedule-report={options}", "-o",
             os.devnull], input="module {}", capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"the schedule report of '{options}': {done.stderr.strip()}")
        ranks = re.findall(r"^  rank \d+: (.*)$", done.stdout, re.M)
        SCHEDULE_CACHE[key] = [line.split() for line in ranks]
    return SCHEDULE_CACHE[key]


ACTION = re.compile(r"(F|B|BI|BW|send-act|recv-act|send-grad|recv-grad)"
                    r"(\d+)\.(\d+)(?:[<>](\d+))?$")


def simulate_schedule(ranks, durations, stages, timeline=None):
    """The time from the first forward to the last backward action of a
    step: every rank runs its actions in order, as Triad's runtime does: a
    receive is posted and its call returns (sends do not block either);
    the pass that reads what it receives (a forward its activation, a
    backward its gradient) waits for it, a transfer taking
    durations["send"]. With `timeline` (a list), each action is appended
    to it as a dict: rank, action, start, end, and for a pass that waited,
    the index of the send it waited for ("after")."""
    clock = [0.0] * len(ranks)
    position = [0] * len(ranks)
    arrived = {}
    # What the first stage (the embedding) and the last (the head) add.
    ends = {p: [0.0] * stages for p in ("F", "B")}
    for p in ("F", "B"):
        ends[p][0] += durations.get(f"embedding_{p}", 0.0)
        ends[p][stages - 1] += durations[f"head_{p}"]
    progress = True
    while progress:
        progress = False
        for rank, actions in enumerate(ranks):
            while position[rank] < len(actions):
                token = actions[position[rank]]
                match = ACTION.match(token)
                if not match:  # reduce-grads, optimizer: timed apart
                    position[rank] += 1
                    continue
                kind, stage, microbatch = match.group(1), int(
                    match.group(2)), int(match.group(3))
                start, after = clock[rank], None
                # What the pass reads from another rank: a forward past the
                # first stage its activation, a backward (or its input
                # half) before the last its gradient.
                needs = ("act", stage, microbatch) if kind == "F" and \
                    stage > 0 else ("grad", stage, microbatch) if kind in (
                        "B", "BI") and stage < stages - 1 else None
                if needs:
                    if needs not in arrived:
                        break
                    if arrived[needs][0] > clock[rank]:
                        after = arrived[needs][1]
                        start = clock[rank] = arrived[needs][0]
                if kind.startswith("recv"):
                    pass  # posted: the pass that reads it waits
                elif kind.startswith("send"):
                    # To the stage after (activations) or before (gradients).
                    direction = kind[5:]
                    to = stage + 1 if direction == "act" else stage - 1
                    arrived[(direction, to, microbatch)] = (
                        clock[rank] + durations["send"],
                        len(timeline) if timeline is not None else None)
                elif kind == "F":
                    clock[rank] += durations["F"] + ends["F"][stage]
                elif kind == "B":
                    clock[rank] += durations["B"] + ends["B"][stage]
                elif kind == "BI":
                    clock[rank] += durations["B"] - durations["W"] + \
                        ends["B"][stage] / 2
                else:  # BW
                    clock[rank] += durations["W"] + ends["B"][stage] / 2
                if timeline is not None:
                    timeline.append({"rank": rank, "action": token,
                                     "start": start, "end": clock[rank],
                                     "after": after})
                position[rank] += 1
                progress = True
    if any(p < len(a) for p, a in zip(position, ranks)):
        fail("the schedule report's actions wait on each other (deadlock)")
    return max(clock)


def critical_path(timeline):
    """The actions that set the step's length, first to last: from the
    action that ends last, back through the action before it on its rank,
    or, for a pass that waited for a transfer, through the send it waited
    for."""
    if not timeline:
        return []
    previous, last_on = [None] * len(timeline), {}
    for i, event in enumerate(timeline):
        previous[i] = last_on.get(event["rank"])
        last_on[event["rank"]] = i
    i = max(range(len(timeline)), key=lambda k: timeline[k]["end"])
    path = []
    while i is not None:
        event, after = dict(timeline[i]), timeline[i]["after"]
        if after is not None:
            # On the path a pass that waited takes the transfer's time, from
            # its send on.
            event["start"] = timeline[after]["start"]
        path.append(event)
        i = after if after is not None else previous[i]
    return path[::-1]


def path_segments(path):
    """The critical path as runs on one rank: (rank, {kind: count}, first
    start, last end)."""
    segments = []
    for event in path:
        kind = ACTION.match(event["action"]).group(1)
        if segments and segments[-1][0] == event["rank"]:
            segments[-1][1][kind] = segments[-1][1].get(kind, 0) + 1
            segments[-1][3] = event["end"]
        else:
            segments.append([event["rank"], {kind: 1}, event["start"],
                             event["end"]])
    return segments


# The compiler's memory of a configuration, per pipeline rank, from
# calibration compiles of the model cut short (CompiledMemory).
SLOTTED_BUFFER = re.compile(
    r"^\s*%(\d+) = rt\.buffer (\d+) slots (\d+) stride (\d+) :")
RT_FUNCTION = re.compile(r"^\s*rt\.func @(\w+) ")
STAGE_FUNCTION = re.compile(r"^(forward|backward|backward_input|"
                            r"backward_weight|recv_act|send_act|recv_grad|"
                            r"send_grad)_s(\d+)(?:_last)?$")
REPORT_LINE = re.compile(r"^\s+(\S.*?)\s{2,}([\d,]+) B")
STAGE_COST = re.compile(r"pipe\.stage (\d+) on rank \d+ layers \[.*?\] "
                        r"flops (\d+) bytes (\d+)")
# The pipeline split's default machine balance (--triad-pipeline-split's
# flops-per-byte): a layer's cost is max(FLOPs, bytes x this).
SPLIT_FLOPS_PER_BYTE = 10.0


def kept_storages(rt_text):
    """The storages each program of a compiled plan keeps between calls,
    read off its slotted buffers and the stage functions that use them:
    per program, {offset: (stage, kinds of the calls touching it, bytes of
    one copy, the compiler's copies)}."""
    programs = []
    for chunk in re.split(r"^\s*rt\.program ", rt_text, flags=re.M)[1:]:
        offset_of, stride, copies, users = {}, {}, {}, {}
        current = None
        for line in chunk.splitlines():
            buffer = SLOTTED_BUFFER.match(line)
            if buffer:
                offset = int(buffer.group(2))
                offset_of[buffer.group(1)] = offset
                copies[offset] = int(buffer.group(3))
                stride[offset] = max(stride.get(offset, 0),
                                     int(buffer.group(4)))
                continue
            function = RT_FUNCTION.match(line)
            if function:
                stage = STAGE_FUNCTION.match(function.group(1))
                current = (stage.group(1).replace("_", "-").replace(
                    "forward", "F").replace("backward-input", "BI").replace(
                    "backward-weight", "BW").replace("backward", "B"),
                    int(stage.group(2))) if stage else None
            elif "rt.step" in line:
                current = None
            if current is None:
                continue
            for ident in re.findall(r"%(\d+)", line):
                if ident in offset_of:
                    users.setdefault(offset_of[ident], set()).add(current)
        # (Each storage belongs to one stage: the lowering refuses a kept
        # value shared across stages.)
        programs.append({
            offset: (next(iter(calls))[1],
                     frozenset(kind for kind, _ in calls), stride[offset],
                     copies[offset])
            for offset, calls in users.items()})
    return programs


def stash_storages(rt_text):
    """kept_storages by stage and kinds of calls: per program, {stage:
    {kinds: bytes of one copy}}."""
    programs = []
    for storages in kept_storages(rt_text):
        stages = {}
        for stage, kinds, bytes_, _ in storages.values():
            by_kinds = stages.setdefault(stage, {})
            by_kinds[kinds] = by_kinds.get(kinds, 0) + bytes_
        programs.append(stages)
    return programs


def memory_report(text):
    """Per program of a memory report: parameters, optimizer state,
    gradient accumulators, activations kept between calls, the bytes placed
    for the temporaries of the step's calls (a pipeline stage's, or
    without a pipeline the microbatch step's with its activations) and of
    the optimizer step, and the arena."""
    programs = []
    for chunk in text.split("triad memory report:")[1:]:
        values = {"activations kept between calls": 0, "calls": 0,
                  "apply": 0}
        for line in chunk.splitlines():
            quantity = REPORT_LINE.match(line)
            if not quantity:
                continue
            label, bytes_ = quantity.group(1), int(
                quantity.group(2).replace(",", ""))
            if label == "placed for the optimizer step":
                values["apply"] = bytes_
            elif label == "placed for the step's calls":
                values["calls"] = bytes_
            elif "at peak" not in label:
                values[label] = bytes_
        programs.append(values)
    return programs


def slot_copies(actions, stage, kind_sets):
    """The copies of a stage's kept storages on one pipeline rank, as
    --triad-lower-to-rt plans them from the rank's calls (the schedule
    report's actions, in order): a microbatch holds the lowest free slot
    from its first call on the stage to its last; a storage touched by the
    calls of `kinds` needs a copy per microbatch live in it at once (from
    the first to the last of those calls), more where two live microbatches'
    slots would share a copy (slot mod copies), at most the stage's slots.
    Returns {kinds: copies}."""
    calls = []
    for token in actions:
        match = ACTION.match(token)
        if match and int(match.group(2)) == stage:
            calls.append((match.group(1), int(match.group(3))))
    last = {microbatch: i for i, (_, microbatch) in enumerate(calls)}
    used, held, slots = [], {}, []
    for i, (_, microbatch) in enumerate(calls):
        if microbatch not in held:
            free = used.index(False) if False in used else len(used)
            if free == len(used):
                used.append(False)
            used[free] = True
            held[microbatch] = free
        slots.append(held[microbatch])
        if last[microbatch] == i:
            used[held[microbatch]] = False
    stage_slots = max(len(used), 1)
    copies = {}
    for kinds in kind_sets:
        lives = {}
        for i, (kind, microbatch) in enumerate(calls):
            if kind in kinds:
                life = lives.setdefault(microbatch, [i, i, slots[i]])
                life[1] = i
        # Sweeping the lives in order of their first call: the most live at
        # once, and the slot differences of every two live together (two
        # collide under n copies where n divides their difference).
        most, differences, active = 1, set(), []
        for life in sorted(lives.values()):
            active = [other for other in active if other[1] >= life[0]]
            most = max(most, len(active) + 1)
            differences.update(abs(life[2] - other[2]) for other in active)
            active.append(life)
        n = most
        while n < stage_slots and any(d % n == 0 for d in differences):
            n += 1
        copies[kinds] = n
    return copies


CUTS = {}


def balanced_cut(costs, stages):
    """--triad-pipeline-split's cut: contiguous pieces whose largest sum is
    smallest, the first such scanning cut points from the left. Returns
    the first index of each piece."""
    key = (tuple(costs), stages)
    if key not in CUTS:
        CUTS[key] = cut_by_cost(costs, stages)
    return CUTS[key]


def cut_by_cost(costs, stages):
    n = len(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    best = [[math.inf] * (n + 1) for _ in range(stages + 1)]
    start = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                cost = max(best[s - 1][j], prefix[i] - prefix[j])
                if cost < best[s][i]:
                    best[s][i], start[s][i] = cost, j
    firsts, i = [0] * stages, n
    for s in range(stages, 0, -1):
        firsts[s - 1] = start[s][i]
        i = start[s][i]
    return firsts


# What a calibration measures besides the kept storages: the state, and
# the largest temporaries of the step's calls and of the optimizer step.
QUANTITIES = ("parameters", "optimizer state", "gradient accumulators",
              "calls", "apply")


def first_error(text):
    """The first line of a tool's error output (what a refusal says)."""
    return (text.strip().splitlines() or ["no message"])[0]


class CalibrationError(Exception):
    """A calibration compile the compiler refused: its class of
    configurations cannot be compiled (the message says why)."""


class CompiledMemory:
    """Each pipeline rank's arena as --triad-train-pipeline compiles a
    configuration, predicted from calibration compiles of the model cut to
    a few layers, per class of configuration: tp, sp, recomputation, ZeRO
    stage (at dp 2), the microbatch size, and whether there is a pipeline
    and whether its backward is split as ZB-H1's. A class costs one compile
    of 16 transformer layers on 6 pipeline stages (STAGES: middle stages of
    1, 2, 4 and 5 layers between two ends of 2), a second with the ends at
    4 layers for ZB-H1 and ZeRO-3 (ENDS: what an end adds grows with its
    layers there), or two without a pipeline (LAYERS: 5 and 6). They give,
    for the first, a middle and the last stage, each quantity as a curve in
    the stage's layers, linear past the points measured (a function's
    temporaries grow by a constant per layer only past its first few):
    parameters, optimizer state, gradient accumulators, each kind of
    storage kept between a stage's calls, and the temporaries the lowering
    places for the step's calls and for the optimizer step (a shard of the
    parameters' under ZeRO). A configuration then costs no compile: its
    layers are cut into stages as the compiler cuts them (balanced_cut, on
    the calibration's stage costs), each kept storage takes the copies the
    compiler would give it on the configuration's schedule (slot_copies, on
    the schedule report's actions), and ZeRO divides the state."""

    # Layers per stage of a calibration compile: the middle stages hold 1,
    # 2, 4 and 5 (a function's temporaries grow by a constant per layer
    # only past its first few), the first and the last as many as one of
    # them. Without a pipeline, 5 and 6 layers (or the model's own count).
    STAGES = (2, 1, 2, 4, 5, 2)
    ENDS = (2, 4)
    LAYERS = (5, 6)

    def __init__(self, setup, dtype, work):
        self.setup, self.dtype, self.work = setup, dtype, work
        self.classes = {}
        # Classes whose calibration the compiler refused, and why.
        self.refused = {}
        self.costs = {}
        # slot_copies by schedule, rank, stage and kinds of kept storages.
        self.copies = {}
        self.compiles = 0
        self.extra = 0
        self.lock = threading.Lock()

    def compile(self, key, stages, costs=False):
        """The memory report, the kept storages and the stage costs of one
        calibration compile: `stages` layers per pipeline stage, or
        without a pipeline one stage of stages[0] layers; at dp 2 under
        ZeRO, else 1."""
        tp, sp, recompute, family, zero, b = key
        pipeline = family != "single"
        pp, layers = (len(stages), sum(stages)) if pipeline else (1, stages[0])
        dp = 2 if zero else 1
        m = pp
        ir = os.path.join(self.work, f"calibration-{layers}-{dp * m * b}.mlir")
        with self.lock:
            generated_model(self.setup, ir, dp * m * b, self.dtype, layers)
            self.compiles += 1
        # Layers a model adds after its transformer layers (CodeGeeX's top
        # query layer) join the last stage.
        with open(ir) as f:
            self.extra = len(set(re.findall(
                r"triad\.layer transformer (\d+)", f.read()))) - layers
        options = f"dp={dp} tp={tp} pp={pp} microbatches={m}"
        if pipeline:
            options += " stages=" + ",".join(
                map(str, stages[:-1] + (stages[-1] + self.extra,)))
        if family == "zb":
            options += " schedule=zb-h1"
        if zero:
            options += f" zero={zero}"
        if sp:
            options += " sp=true"
        if recompute != "none":
            options += f" recompute={recompute}"
        if self.setup.grad_bytes == 2:
            options += " grad-accumulation=param"
        # The outputs go to files: read through pipes, the plan's text costs
        # more than the compile.
        prefix = os.path.join(self.work, f"thread-{threading.get_ident()}")
        command = [triad_opt(), ir, f"--triad-train-pipeline={options}",
                   f"--triad-memory-report=file={prefix}.memory",
                   "-o", f"{prefix}.rt" if pipeline else os.devnull]
        # The cut's costs: the stages as split (the same for every ZeRO
        # stage and schedule).
        costs_key = (tp, sp, recompute, b)
        costs = pipeline and (costs or costs_key not in self.costs)
        if costs:
            # The split's stages alone (not the whole module printed).
            command[2] += f" stage-report={prefix}.stages"
        with open(f"{prefix}.err", "w") as err:
            done = subprocess.run(command, stdout=subprocess.DEVNULL,
                                  stderr=err)
        with open(f"{prefix}.err") as f:
            errors = f.read()
        if done.returncode != 0:
            raise CalibrationError(
                f"the calibration compile '{options}' of {layers} layers "
                f"failed: {first_error(errors)}")
        with open(f"{prefix}.memory") as f:
            programs = memory_report(f.read())
        kept = [{}]
        if pipeline:
            with open(f"{prefix}.rt") as f:
                kept = stash_storages(f.read())
            if costs:
                with open(f"{prefix}.stages") as f:
                    self.costs[costs_key] = {
                        int(stage): max(float(flops), float(bytes_) *
                                        SPLIT_FLOPS_PER_BYTE)
                        for stage, flops, bytes_ in STAGE_COST.findall(
                            f.read())}
        return programs, kept, self.costs.get(costs_key)

    def calibrate(self, key):
        """Per kind of stage (first, middle, last; "single" without a
        pipeline): each quantity at 1 to 4 layers, as (layers, value)
        points, kept storages by the kinds of calls touching them; and the
        embedding's, a layer's and the head's costs for the cut."""
        if key in self.classes:
            return self.classes[key]
        if key in self.refused:
            raise CalibrationError(self.refused[key])
        try:
            self.classes[key] = self.measure(key)
        except CalibrationError as error:
            self.refused[key] = str(error)
            raise
        return self.classes[key]

    def measure(self, key):
        """calibrate's compiles and their solution, for one class."""
        zero = key[4]
        dp = 2 if zero else 1
        # ZeRO's shards at dp 2, whole again (the padding is not counted).
        whole = {"parameters": dp if zero >= 3 else 1,
                 "optimizer state": dp if zero >= 1 else 1,
                 "gradient accumulators": dp if zero >= 2 else 1}

        def measured(program, q):
            return program[q] * whole.get(q, 1)

        if key[3] == "single":
            # The model's layers are all in one function: its own count,
            # or the line through 3 and 4 layers beyond.
            L = self.setup.model["layers"]
            points = (L,) if L <= self.LAYERS[-1] else self.LAYERS
            runs = [self.compile(key, (n,))[0][0] for n in points]
            entry = {q: [(n, measured(run, q)) for n, run in
                         zip(points, runs)] for q in QUANTITIES}
            entry["kept"] = {}
            return {"single": entry}, None
        programs, stashes, costs = self.compile(key, self.STAGES)
        if costs is None:  # another thread was reading them
            costs = self.compile(key, self.STAGES, costs=True)[2]
        # The middle stages: a layer's cost and each quantity's curve. The
        # ends hold as many layers as one middle stage and differ from it
        # by what they add.
        last = len(self.STAGES) - 1
        middles = {self.STAGES[r]: r for r in range(1, last)}
        end = self.STAGES[0]
        layer_cost = (costs[middles[5]] - costs[middles[1]]) / 4
        split_costs = (costs[0] - end * layer_cost, layer_cost,
                       costs[last] - (end + self.extra) * layer_cost)

        def kept_here(rank):
            return stashes[rank].get(rank, {})

        # What an end adds to a middle stage may grow with its layers: the
        # first stage of ZB-H1 keeps for its weight gradients what a middle
        # stage keeps for its input gradients too, and ZeRO-3's first and
        # last stages gather more. Those classes compile the ends again at
        # ENDS[1] layers, on two stages; the others' ends add a constant.
        if key[3] == "zb" or zero >= 3:
            ends, far_stashes, _ = self.compile(key, (self.ENDS[1],) * 2)
        else:
            ends = far_stashes = None

        def curve(middle, near, far):
            """The middle stages' curve plus what the end adds (at ENDS[0]
            layers `near`, at ENDS[1] `far` if measured), linear in its
            layers."""
            (n0, n1), at_n0 = self.ENDS, dict(middle)[self.ENDS[0]]
            growth = 0 if far is None else (
                (far - self.at(middle, n1)) - (near - at_n0)) / (n1 - n0)
            return [(n, value + (near - at_n0) + (n - n0) * growth)
                    for n, value in middle]

        kinds = {}
        for kind, rank, far in (("first", 0, 0), ("middle", None, None),
                                ("last", last, 1)):
            entry = {"kept": {}}
            for q in QUANTITIES:
                middle = [(n, measured(programs[r], q))
                          for n, r in sorted(middles.items())]
                entry[q] = middle if rank is None else curve(
                    middle, measured(programs[rank], q),
                    measured(ends[far], q) if ends else None)
            # Each kind of kept storage of this stage, the same way.
            far_kept = far_stashes[far].get(far, {}) if ends and \
                rank is not None else {}
            stored = kept_here(middles[end]) if rank is None else dict(
                kept_here(rank), **{k: 0 for k in far_kept
                                    if k not in kept_here(rank)})
            for kinds_ in stored:
                middle = [(n, kept_here(r).get(kinds_, 0))
                          for n, r in sorted(middles.items())]
                entry["kept"][kinds_] = middle if rank is None else curve(
                    middle, kept_here(rank).get(kinds_, 0),
                    far_kept.get(kinds_, 0) if ends else None)
            kinds[kind] = entry
        return kinds, split_costs

    def prefetch(self, keys):
        """Calibrates the classes of `keys` not yet calibrated, a compile
        per core at once."""
        missing = [key for key in dict.fromkeys(keys)
                   if key not in self.classes and key not in self.refused]

        def attempt(key):
            try:
                self.calibrate(key)
            except CalibrationError:
                pass  # recorded in `refused`; the configurations say so

        if len(missing) > 1:
            with concurrent.futures.ThreadPoolExecutor(
                    max_workers=os.cpu_count() or 1) as pool:
                list(pool.map(attempt, missing))

    @staticmethod
    def key(config, bound=False):
        """The calibration class of a configuration (at one sequence per
        microbatch for a bound)."""
        family = "single" if config["pp"] == 1 else (
            "zb" if config["schedule"] == "zb-h1" else "fb")
        return (config["tp"], config["sp"], config["recompute"], family,
                config["zero"], 1 if bound else config["microbatch"])

    @staticmethod
    def at(curve, n):
        """A quantity at n layers from its (layers, value) points: through
        them, and beyond on the line through the nearest two."""
        if len(curve) == 1:
            return curve[0][1]
        if n <= curve[0][0]:
            (n0, v0), (n1, v1) = curve[0], curve[1]
        elif n >= curve[-1][0]:
            (n0, v0), (n1, v1) = curve[-2], curve[-1]
        else:
            i = next(i for i, (point, _) in enumerate(curve) if point >= n)
            (n0, v0), (n1, v1) = curve[i - 1], curve[i]
        return v0 + (n - n0) * (v1 - v0) / (n1 - n0)

    def arena(self, config, bound=False):
        """The largest rank's arena in bytes, with its state, kept
        activations and temporaries, and every rank's ("ranks"). With
        `bound`, a lower bound from the class's calibration at one
        sequence per microbatch: the kept activations grow in proportion
        to the microbatch (less their scalars), the temporaries do not
        shrink."""
        dp, tp, pp, zero = (config[k] for k in ("dp", "tp", "pp", "zero"))
        b, v, schedule = (config["microbatch"], config["virtual_stages"],
                          config["schedule"])
        L = self.setup.model["layers"]
        kinds, split_costs = self.calibrate(self.key(config, bound))
        scale = 0.99 * b if bound else 1
        shard = {"parameters": dp if zero >= 3 else 1,
                 "optimizer state": dp if zero >= 1 else 1,
                 "gradient accumulators": dp if zero >= 2 else 1}
        if pp == 1:
            layers, kind_of, actions = [L], lambda s: "single", None
        else:
            S = pp * v
            embedding, layer, head = split_costs
            extra = self.extra
            firsts = balanced_cut([embedding] + [layer] * (L + extra) +
                                  [head], S) + [L + extra + 2]
            layers = [firsts[s + 1] - firsts[s] - (s == 0) -
                      (1 + extra if s == S - 1 else 0) for s in range(S)]
            kind_of = lambda s: "first" if s == 0 else (
                "last" if s == S - 1 else "middle")
            # Copies stop growing once the schedule is in its steady state:
            # a few rounds of microbatches show them all (GPipe keeps every
            # microbatch).
            m = self.setup.batch // (dp * b)
            cap = m if schedule == "gpipe" else 4 * S
            if schedule == "interleaved":
                cap = -(-cap // pp) * pp
            shape = (schedule, pp, min(m, cap), v)
            actions = schedule_actions(*shape)

        at = self.at
        ranks = []
        for rank in range(pp):
            own = range(rank, len(layers), pp)
            state = sum(at(kinds[kind_of(s)][q], layers[s]) / shard[q]
                        for s in own for q in shard)
            kept = 0
            for s in own:
                stored = kinds[kind_of(s)]["kept"]
                if stored:
                    kinds_ = tuple(stored)
                    copies = self.copies.get((shape, rank, s, kinds_))
                    if copies is None:
                        copies = slot_copies(actions[rank], s, kinds_)
                        self.copies[(shape, rank, s, kinds_)] = copies
                    kept += scale * sum(copies[k] * at(stored[k], layers[s])
                                        for k in stored)
            # The optimizer step updates the rank's parameters (a shard of
            # them under ZeRO, calibrated at dp 2).
            apply = sum(at(kinds[kind_of(s)]["apply"], layers[s])
                        for s in own) * (2 / dp if zero else 1)
            temporaries = max([apply] + [
                at(kinds[kind_of(s)]["calls"], layers[s]) for s in own])
            ranks.append({"arena": state + kept + temporaries, "rank": rank,
                          "state": state, "kept": kept,
                          "temporaries": temporaries,
                          "layers": [layers[s] for s in own]})
        return dict(max(ranks, key=lambda r: r["arena"]), ranks=ranks)


COST_OP = re.compile(r"^    (\S+) (?:flops=(\d+) bytes=(\d+)(?: (\w+) batch=(\d+) "
                     r"m=(\d+) n=(\d+) k=(\d+))?(?: fused)?|bytes=(\d+) over "
                     r"\[(.*)\] ranks=(\d+))$")


def cost_report(text, function="microbatch_step"):
    """One function's parts in a --triad-cost-report (with its ops): by
    part name, its ops as dicts: name, flops, bytes, and for products on
    matrix units kind, batch, m, n, k; for collectives bytes, axes and
    ranks."""
    parts, part, inside = {}, None, False
    for line in text.splitlines():
        if line.startswith("triad cost report: @"):
            inside = line.endswith("@" + function)
        elif not inside:
            continue
        elif line.startswith("    "):
            match = COST_OP.match(line)
            if not match:
                fail(f"the cost report's line '{line.strip()}' is not an op")
            (name, flops, bytes_, kind, batch, m, n, k, moved, axes,
             ranks) = match.groups()
            if moved is not None:
                op = {"name": name, "flops": 0.0, "bytes": float(moved),
                      "axes": axes.split(","), "ranks": int(ranks)}
            else:
                op = {"name": name, "flops": float(flops),
                      "bytes": float(bytes_)}
                if kind:
                    op.update(kind=kind, batch=int(batch), m=int(m),
                              n=int(n), k=int(k))
            parts[part].append(op)
        elif line.startswith("  "):
            part = line.strip().split(":")[0]
            parts[part] = []
    return parts


def matched_ops(ops, others):
    """The ops of one part of two cost reports paired, the n-th op of a
    kind in one with the n-th of that kind in the other (the collectives'
    order may differ between microbatch sizes); None where the parts hold
    other ops."""
    if sorted(op["name"] for op in ops) != sorted(op["name"] for op in
                                                  others):
        return None
    by_kind = {}
    for op in others:
        by_kind.setdefault(op["name"], []).append(op)
    seen = {}
    pairs = []
    for op in ops:
        pairs.append((op, by_kind[op["name"]][seen.get(op["name"], 0)]))
        seen[op["name"]] = seen.get(op["name"], 0) + 1
    return pairs


class CompiledCosts:
    """The ops of a layer's forward and backward, of the embedding and of
    the head, as the compiler partitions them for one rank: their FLOPs,
    bytes and product shapes (the ops' CostOpInterface) and the tensor-
    parallel collectives between them, from --triad-cost-report. One
    compile of the model cut to two layers (the first is any middle
    layer; the last adds the head's boundary) per tp, sp and microbatch
    size (tens of milliseconds each; the largest sizes by the line through
    two, see COMPILED); recomputation adds forward ops to the backward as
    the autodiff does (full: the whole layer's; selective: attention's),
    so it needs no compile of its own."""

    def __init__(self, setup, dtype, work):
        self.setup, self.dtype, self.work = setup, dtype, work
        # Parts by (tp, sp, b), or the CalibrationError of their compile.
        self.reports = {}
        # pass_times by tp, sp, microbatch and recomputation.
        self.times = {}
        self.compiles = 0
        self.lock = threading.Lock()

    def compile(self, tp, sp, b):
        ir = os.path.join(self.work, f"costs-{b}.mlir")
        with self.lock:
            generated_model(self.setup, ir, b, self.dtype, 2)
        options = f"tp={tp}" + (" sp=true" if sp else "")
        report = os.path.join(self.work, f"costs-{tp}-{sp}-{b}.txt")
        with self.lock:
            self.compiles += 1
        done = subprocess.run(
            [triad_opt(), ir, f"--triad-train-pipeline={options} "
             f"cost-report={report}", "-o", os.devnull],
            capture_output=True, text=True)
        if done.returncode != 0:
            return CalibrationError(f"the cost report's compile '{options}' "
                                    f"at microbatch {b} failed: "
                                    f"{first_error(done.stderr)}")
        with open(report) as f:
            return cost_report(f.read())

    # Microbatch sizes compiled; larger ones are on the line through the
    # last two (every quantity of a report grows linearly with the
    # microbatch: the rows of the products, attention's samples, the
    # activations' bytes; where the ops themselves differ, the size is
    # compiled). A single sequence is compiled apart: with sequence
    # parallelism its backward gathers more.
    COMPILED = (1, 2, 4)

    def prefetch(self, keys):
        """The reports of the (tp, sp, b) keys not yet read, a compile per
        core at once."""
        keys = list(dict.fromkeys(keys))
        needed = {(tp, sp, c) for tp, sp, b in keys
                  for c in ((b,) if b in self.COMPILED else self.COMPILED[-2:])}
        missing = sorted(key for key in needed if key not in self.reports)
        self.compile_all(missing)
        for key in keys:
            if key not in self.reports:
                drawn = self.extrapolate(*key)
                if drawn is not None:
                    self.reports[key] = drawn
        self.compile_all([key for key in keys if key not in self.reports])

    def compile_all(self, keys):
        """Compiles the reports of `keys`, one per core at once."""
        with concurrent.futures.ThreadPoolExecutor(
                max_workers=os.cpu_count() or 1) as pool:
            self.reports.update(zip(keys, pool.map(
                lambda key: self.compile(*key), keys)))

    def extrapolate(self, tp, sp, b):
        """The report at b sequences on the line through the last two
        compiled (the same ops in each part, matched by kind in order), or
        None where their ops differ (it is compiled then)."""
        b0, b1 = self.COMPILED[-2:]
        one, two = self.reports[(tp, sp, b0)], self.reports[(tp, sp, b1)]
        if isinstance(one, CalibrationError):
            return one
        if isinstance(two, CalibrationError):
            return two
        parts = {}
        for name, ops in one.items():
            pairs = matched_ops(ops, two.get(name, []))
            if pairs is None:
                return None
            parts[name] = [{
                key: value + (b - b0) * (other[key] - value) / (b1 - b0)
                if isinstance(value, (int, float)) and key != "ranks"
                else value for key, value in op.items()}
                for op, other in pairs]
        return parts

    def parts(self, tp, sp, b):
        """The parts' ops at b sequences a microbatch."""
        if (tp, sp, b) not in self.reports:
            self.prefetch([(tp, sp, b)])
        report = self.reports[(tp, sp, b)]
        if isinstance(report, CalibrationError):
            raise report
        return report


class Setup:
    """What the search holds fixed: the model, the cluster, the batch and
    the implementation being predicted."""

    def __init__(self, model, cluster, batch, dtype, grad_accumulation,
                 implementation):
        self.model, self.cluster, self.batch = model, cluster, batch
        # Bytes of a parameter, of a summed gradient, and of the optimizer
        # state per parameter (f32 master copy, if any, and two moments).
        if dtype == "f32":
            self.param_bytes, self.grad_bytes, self.optimizer_bytes = 4, 4, 8
            self.peak = cluster.f32_peak
        else:
            self.param_bytes = 2
            self.grad_bytes = 4 if grad_accumulation == "f32" else 2
            self.optimizer_bytes = 12
            self.peak = cluster.peak
        self.activation_scale = 2 if dtype == "f32" else 1
        self.megatron = implementation == "megatron-2021"
        # The compiler's cost report of the layers (CompiledCosts), or
        # None for the closed form.
        self.costs = None


def activation_bytes(setup, config, b):
    """Bytes one layer keeps for the backward pass of one microbatch
    (Korthikanti et al. 2022, in 16 bits): s b h (10 + 24 / t), or s b h 34
    / t with sequence parallelism, plus the attention scores' 5 a s^2 b / t
    where attention is not fused, less the two hidden dropout masks (2 s b h)
    where they are regenerated from the seed (Triad); s b h 2, the layer's
    input, with full recomputation."""
    m = setup.model
    s, h, a, t = m["seq"], m["hidden"], m["heads"], config["tp"]
    if config["recompute"] == "full":
        return 2 * s * b * h * setup.activation_scale
    kept = s * b * h * (34 / t if config["sp"] else 10 + 24 / t)
    if not setup.megatron:
        kept -= 2 * s * b * h / (t if config["sp"] else 1)
    if setup.megatron and config["recompute"] == "none":
        kept += 5 * a * s * s * b / t
    return kept * setup.activation_scale


def product_seconds(setup, op):
    """A product's or attention's FLOPs at the peak times its efficiency by
    shape: a product by its narrowest side (m, n or k), attention by its
    head size and sequence (attention_efficiency). The backward of
    Megatron-LM 2021's unfused attention reads the kept scores instead of
    recomputing them (4 products of the forward's size, not 5)."""
    cluster, flops = setup.cluster, op["flops"]
    if op["kind"] == "product":
        return flops / (setup.peak * product_efficiency(
            min(op["m"], op["n"], op["k"]), cluster.efficiency,
            cluster.product_half))
    if setup.megatron and op["kind"] == "attention_grad":
        flops *= 4 / 5
    return flops / (setup.peak * attention_efficiency(cluster, op["m"],
                                                      op["k"]))


def attention_efficiency(cluster, seq, head):
    """Fused attention's share of the peak: the products' best, relative
    to them the device's attention_efficiency, and less for short heads
    (its products are a head deep) and short sequences (each block of
    queries walks the keys): a head of attention_half_head or a sequence
    of attention_half_seq halves it."""
    def falloff(size, half):
        return size / (size + half) if half else 1.0
    return (cluster.efficiency * cluster.attention_efficiency *
            falloff(head, cluster.attention_half_head) *
            falloff(seq, cluster.attention_half_seq))


def op_seconds(setup, op):
    """One op of a cost report on one GPU, by the roofline: its FLOPs at
    its rate (product_seconds for products on matrix units; the f32 peak
    of the vector units for the rest) or its bytes at the memory
    bandwidth, whichever is longer."""
    compute = product_seconds(setup, op) if "kind" in op else \
        op["flops"] / setup.cluster.f32_peak
    return max(compute, op["bytes"] / setup.cluster.hbm)


def collective_seconds(setup, config, op):
    """A tensor-parallel collective of a cost report: an all-reduce by the
    faster of the ring and the tree, the others by the ring (NCCL has
    rings only for those), inside a node or across nodes."""
    cluster = setup.cluster
    inside = config["tp"] <= cluster.per_node
    args = (op["bytes"], op["ranks"], cluster.nvlink if inside else
            cluster.ib, cluster.latency if inside else LATENCY_IB)
    if op["name"] == "dist.all_reduce":
        return all_reduce_seconds(*args)
    return ring_seconds(*args, 1)


def pass_times(setup, config):
    """One microbatch's times on one rank: a transformer layer's forward
    and backward (with its recomputation), each with its tensor-parallel
    collectives (not overlapped); the weight gradients' part of the
    backward (ZB-H1's W); the embedding's and the head's passes; the
    layer's collectives; the products' FLOP-weighted efficiency; and the
    work by kind. From the compiler's cost report (CompiledCosts) where
    the setup has one, else by the closed form."""
    if setup.costs is None:
        return closed_form_pass_times(setup, config)
    # They depend on nothing else (and the search asks for them often).
    key = (config["tp"], config["sp"], config["microbatch"],
           config["recompute"])
    if key not in setup.costs.times:
        setup.costs.times[key] = reported_pass_times(setup, config)
    return setup.costs.times[key]


def reported_pass_times(setup, config):
    """pass_times from the compiler's cost report."""
    recompute, b = config["recompute"], config["microbatch"]
    parts = setup.costs.parts(config["tp"], config["sp"], b)
    tokens = setup.model["seq"] * b

    def seconds(ops):
        """The ops' compute and their collectives' time."""
        return (sum(op_seconds(setup, op) for op in ops if "ranks" not in op),
                sum(collective_seconds(setup, config, op) for op in ops
                    if "ranks" in op))

    def total(part):
        """A part's time, its collectives' included."""
        return sum(seconds(parts.get(part, [])))

    forward_ops = parts["transformer 0"]
    backward_ops = parts["transformer 0 backward"] + (
        forward_ops if recompute == "full" else
        [op for op in forward_ops if op.get("kind") == "attention"]
        if recompute == "selective" else [])
    (forward, tp_forward), (backward, tp_backward) = (
        seconds(forward_ops), seconds(backward_ops))
    if setup.megatron:
        # Unfused attention writes and reads its scores and probabilities
        # (and their gradients in the backward).
        scores = tokens * UNFUSED_SCORE_BYTES * setup.model["heads"] * \
            setup.model["seq"] / config["tp"] * setup.activation_scale / \
            setup.cluster.hbm
        forward, backward = forward + scores, backward + 2 * scores
    # The weight gradients: the backward's products over the tokens.
    weight = sum(op_seconds(setup, op) for op in parts[
        "transformer 0 backward"] if op.get("kind") == "product" and
        op["k"] == tokens)
    # Layers a model adds after its transformer layers (CodeGeeX's top
    # query layer) and the ops outside every layer run with the head; so
    # does what the last transformer layer adds to the others (with
    # sequence parallelism, the gather of its output for the head).
    head = [name for name in parts if not name.startswith(
        ("embedding", "transformer 0", "transformer 1"))]
    head_F = sum(total(n) for n in head if not n.endswith("backward")) + \
        max(0.0, total("transformer 1") - total("transformer 0"))
    head_B = sum(total(n) for n in head if n.endswith("backward")) + \
        max(0.0, total("transformer 1 backward") -
            total("transformer 0 backward"))
    products = [op for op in forward_ops + backward_ops
                if op.get("kind") == "product"]
    product_flops = sum(op["flops"] for op in products)

    def work(ops):
        return {"product_flops": sum(op["flops"] for op in ops
                                     if op.get("kind") == "product"),
                "attention_flops": sum(op["flops"] for op in ops if
                                       op.get("kind", "").startswith(
                                           "attention")),
                "elementwise_bytes": sum(op["bytes"] for op in ops
                                         if "kind" not in op and
                                         "ranks" not in op)}

    return {"by": "cost report",
            "forward": forward + tp_forward,
            "backward": backward + tp_backward,
            "tp": tp_forward + tp_backward, "weight": weight,
            "head_F": head_F, "head_B": head_B,
            "embedding_F": total("embedding 0"),
            "embedding_B": total("embedding 0 backward"),
            "efficiency": product_flops / sum(
                product_seconds(setup, op) for op in products) /
            setup.peak if products else 0.0,
            "work": {"layer": work(forward_ops + backward_ops),
                     "head": work([op for n in head for op in parts[n]])}}


def closed_form_pass_times(setup, config):
    """pass_times by the closed form, from the model's sizes alone: the
    FLOPs of each pass (2 per layer parameter and token, 4 s h per token in
    attention) at one efficiency by the layer's narrowest product, the
    backward twice the forward, element-wise bytes per token and layer,
    two tensor-parallel collectives per layer and pass."""
    model, cluster = setup.model, setup.cluster
    h, a, s, V = model["hidden"], model["heads"], model["seq"], model["vocab"]
    tp, recompute = config["tp"], config["recompute"]
    tokens = s * config["microbatch"]
    width = min(h / tp * 3, 4 * h / tp, h, tokens)
    efficiency = product_efficiency(width, cluster.efficiency,
                                    cluster.product_half)
    # Attention's products (4 s h FLOPs per token) may run at another rate
    # than the layers' (a device's attention_efficiency, relative).
    attention = tokens * 4 * s * h / tp / (
        setup.peak * efficiency * cluster.attention_efficiency)
    product = tokens * 2 * model["per_layer"] / tp / (
        setup.peak * efficiency) + attention
    elementwise_bytes = tokens * h * (
        (ELEMENTWISE_WHOLE + ELEMENTWISE_SHARED) / tp if config["sp"] else
        ELEMENTWISE_WHOLE + ELEMENTWISE_SHARED / tp)
    if setup.megatron:
        elementwise_bytes += tokens * UNFUSED_SCORE_BYTES * a * s / tp
    elementwise_bytes *= setup.activation_scale
    elementwise = elementwise_bytes / cluster.hbm
    # Two all-reduces per layer and pass (by the faster of the ring and
    # the tree), with sp an all-gather and a reduce-scatter each (the same
    # bytes; NCCL has rings only for those).
    inside = tp <= cluster.per_node
    tp_args = (tokens * h * setup.param_bytes, tp,
               cluster.nvlink if inside else cluster.ib,
               cluster.latency if inside else LATENCY_IB)
    tp_call = ring_seconds(*tp_args, 2) if config["sp"] else \
        all_reduce_seconds(*tp_args)
    forward = product + elementwise + 2 * tp_call
    backward = 2 * (product + elementwise) + 2 * tp_call
    if recompute == "full":
        backward += forward
    elif recompute == "selective":
        backward += attention
    head = tokens * 2 * h * V / tp / (setup.peak * efficiency)
    return {"by": "closed form", "forward": forward, "backward": backward,
            "tp": (4 + (2 if recompute == "full" else 0)) * tp_call,
            "weight": tokens * 2 * model["per_layer"] / tp /
            (setup.peak * efficiency),
            "head_F": head, "head_B": 2 * head,
            "embedding_F": 0.0, "embedding_B": 0.0,
            "efficiency": efficiency,
            "work": {"layer": {"product_flops": 3 * tokens * 2 *
                               model["per_layer"] / tp,
                               "attention_flops": 3 * tokens * 4 * s * h / tp,
                               "elementwise_bytes": 3 * elementwise_bytes},
                     "head": {"product_flops": 3 * tokens * 2 * h * V / tp,
                              "elementwise_bytes": 0.0}}}


def evaluate(setup, config, simulate=False, closed_memory=True,
             timeline=None):
    """Memory and time of one configuration, or None where it cannot run
    (the batch or the layers do not divide). Without `closed_memory` (the
    compiler's memory comes later, by compiled_memory), only a
    configuration whose model state alone cannot fit is turned down
    early."""
    model, cluster, batch = setup.model, setup.cluster, setup.batch
    dp, tp, pp = config["dp"], config["tp"], config["pp"]
    b, zero = config["microbatch"], config["zero"]
    schedule, recompute = config["schedule"], config["recompute"]
    L, h, s, V = (model["layers"], model["hidden"], model["seq"],
                  model["vocab"])
    if batch % (dp * b) or pp > L:
        return None
    m = batch // (dp * b)
    v = config["virtual_stages"]
    # The layers of the fullest stage (the compiler gives the first stages
    # the extra ones where pp does not divide the layers).
    stage_layers = -(-L // pp)
    # The interleaved schedule cuts the layers into pp x v stages and takes
    # the microbatches in rounds of pp (the compiler requires both).
    if v > 1 and (schedule != "interleaved" or L % (pp * v) or m % pp):
        return None

    # Memory of the first pipeline stage: it keeps the most microbatches'
    # activations, and the embedding (both ends of the model with pp = 1).
    # Where pp does not divide the layers, the compiler's cost balance
    # decides which stages get the extra ones: count one (an upper bound).
    first_layers = L if pp == 1 else stage_layers
    psi = (model["per_layer"] * first_layers - model["whole"] +
           (model["params"] - L * model["per_layer"] if pp == 1 else
            model["embedding"])) / tp + model["whole"]
    p_bytes, g_bytes, o_bytes = (setup.param_bytes, setup.grad_bytes,
                                 setup.optimizer_bytes)
    state = psi * {0: p_bytes + g_bytes + o_bytes,
                   1: p_bytes + g_bytes + o_bytes / dp,
                   2: p_bytes + (g_bytes + o_bytes) / dp,
                   3: (p_bytes + g_bytes + o_bytes) / dp}[zero]
    if schedule == "gpipe":
        kept = m
    else:
        kept = min(pp, m) * (1 + (pp - 1) / (pp * v) if v > 1 else 1)
    activations = activation_bytes(setup, config, b) * first_layers * kept
    if recompute == "full":
        # The layer being recomputed holds its whole working set.
        activations += activation_bytes(
            setup, dict(config, recompute="none"), b)
    logits = s * b * V / tp * 4 if pp == 1 else 0  # f32, with the last layer
    peak = state + activations + logits + RESERVED_GIB * 2**30
    # (The state is within 1% of the compiler's.)
    if (peak if closed_memory else 0.98 * state + RESERVED_GIB * 2**30) > \
            cluster.memory:
        return {"fits": False, "memory": peak, "state": state,
                "activations": activations}

    tokens = s * b
    t = pass_times(setup, config)
    forward, backward = t["forward"], t["backward"]
    # The stages are balanced by layers; an end stage also runs the
    # embedding or the head (and its output projection), forward and
    # backward.
    ends = max(t["head_F"] + t["head_B"], t["embedding_F"] +
               t["embedding_B"])
    per_microbatch = stage_layers * (forward + backward) + ends
    tp_per_microbatch = stage_layers * t["tp"]
    send = 0.0
    if pp > 1:
        across = tp * pp > cluster.per_node
        # Activations forward and their gradients back, a rank's 1 / tp of
        # them (scattered and gathered inside the node).
        send = 2 * v * (
            tokens * h * setup.param_bytes / tp /
            (cluster.ib if across else cluster.nvlink) +
            (LATENCY_IB if across else cluster.latency))
    compute = m * per_microbatch
    # The pipeline's fill and drain: 1F1B and GPipe idle (pp - 1) stage
    # times, the interleaved schedule 1 / v of that, ZB-H1 a third (the
    # weight gradients fill it).
    bubble_share = {"1f1b": 1.0, "gpipe": 1.0, "interleaved": 1.0 / v,
                    "zb-h1": 1.0 / 3}[schedule]
    bubble = (pp - 1) * bubble_share * (per_microbatch + send)
    pipeline = m * send
    simulated = None
    if simulate and pp > 1:
        # The compiler's own schedule, action by action: each stage's
        # forward and backward (split into input and weight gradients for
        # ZB-H1, the weight gradients being one product per layer), the
        # transfers between ranks; the slowest rank ends the step.
        layers = stage_layers / v
        durations = {"F": layers * forward, "B": layers * backward,
                     "head_F": t["head_F"], "head_B": t["head_B"],
                     "embedding_F": t["embedding_F"],
                     "embedding_B": t["embedding_B"],
                     "W": layers * t["weight"], "send": send / (2 * v)}
        makespan = simulate_schedule(
            schedule_actions(schedule, pp, m, v), durations, pp * v,
            timeline)
        simulated = makespan
        bubble = max(0.0, makespan - compute - pipeline)
    # Data parallelism, across nodes when the replicas span them, as Triad
    # places it. ZeRO-0 all-reduces each bucket of the summed gradients in
    # the backward of the stage's last microbatch, once the bucket is
    # complete (overlap-grad-reduce; under a pipeline so on the first
    # stage, which ends the step, the later ones reducing during its
    # drain): exposed as a reduce-scatter below.
    # ZeRO-1 reduce-scatters them in the optimizer step, after every
    # microbatch: nothing to overlap. ZeRO-2 and -3
    # reduce-scatter each microbatch's gradients right after the layer
    # that completes them (the partition puts a collective that changes a
    # result's layout there), while the backward goes on through the
    # stage's earlier layers; the call waits for them at its end, so what
    # is exposed is the last layer's, or what the earlier layers' backward
    # cannot hide. ZeRO-3 gathers each layer's parameters where the
    # forward and the backward use them: not overlapped.
    across = dp > 1 and dp * tp * pp > cluster.per_node
    bandwidth = cluster.ib if across else cluster.nvlink
    latency = LATENCY_IB if across else cluster.latency

    def collective(bytes_, factor):
        return ring_seconds(bytes_, dp, bandwidth, latency, factor)

    gradients, params = psi * g_bytes, psi * p_bytes
    def hidden_by_backward(seconds):
        """What the backward of the stage's earlier layers cannot hide of
        collectives that start as each layer's gradients are complete."""
        return max(seconds / stage_layers,
                   seconds - (stage_layers - 1) * backward)

    scatter = collective(gradients, 1)
    exposed = hidden_by_backward(scatter)
    reduce = all_reduce_seconds(gradients, dp, bandwidth, latency)
    dp_time = {0: hidden_by_backward(reduce),
               1: collective(gradients, 1) + collective(params, 1),
               2: m * exposed + collective(params, 1),
               3: m * (exposed + 2 * collective(params, 1))
               }[zero]
    # AdamW reads and writes its state, the summed gradients and the
    # parameters once.
    optimizer_bytes = psi * 2 * (p_bytes + g_bytes + o_bytes) / (
        dp if zero else 1)
    optimizer = optimizer_bytes / cluster.hbm
    step = compute + bubble + pipeline + dp_time + optimizer
    if cluster.count > cluster.cores:
        # More ranks than cores (a CPU): the ranks' busy time shares the
        # cores, and a rank idle in the bubble leaves its share to others.
        busy = step - bubble
        stretched = busy * cluster.count / cluster.cores
        if stretched > step:
            scale = stretched / step
            compute, bubble, pipeline, dp_time, optimizer = (
                x * scale for x in (compute, bubble, pipeline, dp_time,
                                    optimizer))
            step = stretched

    # Model FLOPs by Narayanan et al.'s convention (their Eq. 3): per pass
    # 2 per layer parameter and token and 4 s h per token and layer in
    # attention; 3 passes, 4 with full recomputation's second forward; the
    # output projection 3. MFU counts 6 per parameter and token plus
    # attention's 12 L h s, against the dense peak.
    passes = 4 if recompute == "full" else 3
    model_flops = passes * batch * s * L * (2 * model["per_layer"] +
                                            4 * s * h) + 6 * batch * s * h * V
    gpus = cluster.count
    return {"fits": True, "memory": peak, "state": state,
            "memory_by": "closed form",
            "simulated_pipeline": simulated,
            "activations": activations, "step": step,
            "tokens_per_s": batch * s / step,
            "tflops": model_flops / step / gpus / 1e12,
            "mfu": (6 * model["params"] + 12 * L * h * s) * batch * s / step
            / gpus / setup.peak,
            "compute": compute, "tp_time": m * tp_per_microbatch,
            "bubble": bubble, "pp_time": pipeline, "dp_time": dp_time,
            # ZeRO-2 and -3: a microbatch's reduce-scatter of the stage's
            # gradients, and what the backward leaves of it exposed.
            "dp_scatter": scatter if zero >= 2 else 0.0,
            "dp_exposed": exposed if zero >= 2 else 0.0,
            # ZeRO-0: the step's all-reduce of the gradients (partly
            # hidden by the backward of the stage's last microbatch).
            "dp_all_reduce": reduce if zero == 0 else 0.0,
            "optimizer": optimizer, "microbatches": m,
            "efficiency": t["efficiency"], "time_by": t["by"],
            # The work of one step on a stage of the layers and the head, by
            # kind: what a device's rates divide (bench/plan_vs_cpu.py
            # calibrates on it).
            "work": {"product_flops": m * (stage_layers * t["work"][
                         "layer"]["product_flops"] +
                         t["work"]["head"]["product_flops"]),
                     "attention_flops": m * stage_layers *
                     t["work"]["layer"]["attention_flops"],
                     "elementwise_bytes": m * (stage_layers * t["work"][
                         "layer"]["elementwise_bytes"] +
                         t["work"]["head"]["elementwise_bytes"]),
                     "optimizer_bytes": optimizer_bytes}}


def bound_fits(memory, config, limit):
    """Whether the lower bound of a configuration's memory (from its
    class at one sequence a microbatch) leaves it a chance to fit; a class
    the compiler refuses leaves the configuration to compiled_memory to
    report."""
    try:
        return memory.arena(config, bound=True)["arena"] <= limit
    except CalibrationError:
        return True


def compiled_memory(memory, result):
    """`result` (a configuration and its evaluation) with the memory the
    compiler would plan for its largest rank (CompiledMemory)."""
    arena = memory.arena(result)
    peak = arena["arena"] + RESERVED_GIB * 2**30
    return dict(result, memory=peak, fits=peak <= memory.setup.cluster.memory,
                state=arena["state"], activations=arena["kept"],
                temporaries=arena["temporaries"], memory_rank=arena["rank"],
                memory_by="compiler")


def candidates(setup, fixed):
    """Every configuration the cluster and the model allow: tensor
    parallelism inside a node (dividing the heads), pipeline stages
    dividing the layers, data parallelism the rest."""
    model, n = setup.model, setup.cluster.count
    for tp in divisors(setup.cluster.per_node):
        if model["heads"] % tp or model.get("kv_heads", model["heads"]) % \
                tp or fixed.get("tp", tp) != tp:
            continue
        for pp in divisors(n // tp):
            if pp > model["layers"] or fixed.get("pp", pp) != pp:
                continue
            dp = n // (tp * pp)
            for b in (1, 2, 4, 8, 16):
                if fixed.get("microbatch", b) != b:
                    continue
                for zero in (0, 1, 2, 3):
                    if (zero and dp == 1) or fixed.get("zero", zero) != zero:
                        continue
                    for schedule, v in SCHEDULES:
                        if pp == 1 and schedule != "1f1b":
                            continue
                        for sp in (False, True) if tp > 1 else (False,):
                            for recompute in RECOMPUTE:
                                yield {"dp": dp, "tp": tp, "pp": pp,
                                       "microbatch": b, "zero": zero,
                                       "schedule": schedule,
                                       "virtual_stages": v, "sp": sp,
                                       "recompute": recompute}


def pipeline_options(setup, config):
    """The --triad-train-pipeline options of a configuration."""
    m = setup.batch // (config["dp"] * config["microbatch"])
    options = [f"dp={config['dp']}", f"tp={config['tp']}",
               f"pp={config['pp']}", f"microbatches={m}"]
    if config["zero"]:
        options.append(f"zero={config['zero']}")
    if config["pp"] > 1 and config["schedule"] != "1f1b":
        options.append(f"schedule={config['schedule']}")
    if config["virtual_stages"] > 1:
        options.append(f"virtual-stages={config['virtual_stages']}")
    if config["sp"]:
        options.append("sp=true")
    if config["recompute"] != "none":
        options.append(f"recompute={config['recompute']}")
    if setup.grad_bytes == 2:
        options.append("grad-accumulation=param")
    return " ".join(options)


def parse_config(text):
    """An --explain configuration: the train pipeline's option names (dp,
    tp, pp, zero, schedule, virtual-stages, sp, recompute) and microbatch
    (sequences per microbatch)."""
    config = {"zero": 0, "schedule": "1f1b", "virtual_stages": 1, "sp": False,
              "recompute": "none", "microbatch": 1}
    for item in text.split():
        key, _, value = item.partition("=")
        key = key.replace("-", "_")
        if not value or key not in config and key not in ("dp", "tp", "pp"):
            fail(f"--explain: '{item}' is not one of dp=, tp=, pp=, "
                 "microbatch=, zero=, schedule=, virtual-stages=, sp=, "
                 "recompute=")
        if key == "schedule":
            if value not in {name for name, _ in SCHEDULES}:
                fail(f"--explain: unknown schedule '{value}'")
            config[key] = value
        elif key == "recompute":
            if value not in RECOMPUTE:
                fail(f"--explain: unknown recompute '{value}'")
            config[key] = value
        elif key == "sp":
            config[key] = value in ("1", "true")
        else:
            try:
                config[key] = int(value)
            except ValueError:
                fail(f"--explain: {key} wants a number, not '{value}'")
            if config[key] < (0 if key == "zero" else 1):
                fail(f"--explain: {key}={value} is out of range")
    for key in ("dp", "tp", "pp"):
        if key not in config:
            fail(f"--explain needs {key}=")
    if config["zero"] > 3:
        fail("--explain: zero is 0, 1, 2 or 3")
    if config["virtual_stages"] > 1 and config["schedule"] != "interleaved":
        fail("--explain: virtual-stages needs schedule=interleaved")
    if config["schedule"] == "interleaved" and config["virtual_stages"] == 1:
        config["virtual_stages"] = 2
    return config


def parameters(model):
    count = model["params"]
    return (f"{count / 1e9:.1f} B parameters" if count >= 1e9 else
            f"{count / 1e6:.1f} M parameters")


def describe(config):
    text = (f"dp={config['dp']} tp={config['tp']} pp={config['pp']} "
            f"microbatch={config['microbatch']} zero={config['zero']} "
            f"schedule={config['schedule']}")
    if config["virtual_stages"] > 1:
        text += f" virtual-stages={config['virtual_stages']}"
    return text + f" sp={'true' if config['sp'] else 'false'} " \
        f"recompute={config['recompute']}"


def explain(setup, config, as_json, memory=None):
    timeline = []
    try:
        result = evaluate(setup, config, simulate=True,
                          closed_memory=memory is None, timeline=timeline)
    except CalibrationError as error:
        fail(f"the compiler refuses this configuration: {error}")
    if result is None:
        fail("the configuration does not divide the batch, the layers or "
             "the virtual stages")
    if memory:
        try:
            result = {k: v for k, v in compiled_memory(
                memory, dict(config, **result)).items() if k not in config}
        except CalibrationError as error:
            fail(f"the compiler refuses this configuration: {error}")
    report = dict(config, **result, options=pipeline_options(setup, config),
                  critical_path=critical_path(timeline))
    if as_json:
        print(json.dumps(report, indent=1))
        return
    model, cluster = setup.model, setup.cluster
    print(f"{model['name']}: {parameters(model)}, batch {setup.batch} x "
          f"{model['seq']}, on {cluster.count} x {cluster.name}")
    print(f"configuration: {describe(config)}")
    print(f"  --triad-train-pipeline options: {report['options']}")
    print(f"  memory per GPU: {result['memory'] / 2**30:.1f} GiB of "
          f"{cluster.memory / 2**30:.0f}" +
          ("" if result["fits"] else " (does not fit)"))
    if not result["fits"]:
        sys.exit(2)
    if memory:
        print(f"    pipeline rank {result['memory_rank']}: model state "
              f"{result['state'] / 2**30:.1f} GiB, activations kept "
              f"{result['activations'] / 2**30:.1f} GiB, temporaries "
              f"{result['temporaries'] / 2**30:.1f} GiB (the compiler's)")
    else:
        print(f"    model state {result['state'] / 2**30:.1f} GiB, "
              f"activations {result['activations'] / 2**30:.1f} GiB")
    print(f"  step {result['step']:.3f} s: {result['tokens_per_s']:,.0f} "
          f"tokens/s, {result['tflops']:.1f} TFLOP/s per GPU, MFU "
          f"{100 * result['mfu']:.1f}%")
    step = result["step"]
    for key, label in (("compute", "microbatches on a stage"),
                       ("tp_time", "  of which tensor-parallel collectives"),
                       ("bubble", "pipeline fill and drain"),
                       ("pp_time", "pipeline sends"),
                       ("dp_time", "data-parallel collectives"),
                       ("optimizer", "optimizer step")):
        print(f"    {label:<38} {result[key]:9.3f} s {100 * result[key] / step:5.1f}%")
    if result["dp_scatter"]:
        print(f"  each microbatch's reduce-scatter of the gradients takes "
              f"{result['dp_scatter']:.3f} s, of which the stage's backward "
              f"leaves {result['dp_exposed']:.3f} s exposed")
    if result["dp_all_reduce"]:
        print(f"  the all-reduce of the gradients takes "
              f"{result['dp_all_reduce']:.3f} s, of which the last "
              f"microbatch's backward leaves {result['dp_time']:.3f} s "
              f"exposed")
    if result["simulated_pipeline"] is not None:
        print(f"  the pipeline simulated on the compiler's {config['schedule']}"
              f" schedule, action by action: "
              f"{result['simulated_pipeline']:.3f} s from the first forward to "
              f"the last backward")
        explain_path(report["critical_path"])
    print(f"  {result['microbatches']} microbatches a replica; matrix products "
          f"at {100 * result['efficiency']:.0f}% of the peak (layer times by "
          f"the {result['time_by']})")


KIND_NAMES = {"F": "forward", "B": "backward", "BI": "input gradient",
              "BW": "weight gradient", "send-act": "activation send",
              "recv-act": "activation receive", "send-grad": "gradient send",
              "recv-grad": "gradient receive"}


def explain_path(path):
    """The critical path of the simulated pipeline: its time by kind of
    action (a transfer's time is the wait of the receive after it), then
    its runs of actions on one rank, the first and last four if many."""
    if not path:
        return
    by_kind = {}
    for event in path:
        kind = ACTION.match(event["action"]).group(1)
        by_kind[kind] = by_kind.get(kind, 0) + event["end"] - event["start"]
    total = path[-1]["end"] - path[0]["start"]
    print(f"  its critical path: {len(path)} actions, {total:.3f} s: " +
          ", ".join(f"{KIND_NAMES[k]}s {t:.3f} s" for k, t in
                    sorted(by_kind.items(), key=lambda kt: -kt[1])
                    if t >= 0.0005))
    segments = path_segments(path)
    shown = segments if len(segments) <= 8 else \
        segments[:4] + [None] + segments[-4:]
    for segment in shown:
        if segment is None:
            print(f"    ... {len(segments) - 8} more runs ...")
            continue
        rank, kinds, start, end = segment
        what = ", ".join(f"{n} {KIND_NAMES[k]}{'s' if n > 1 else ''}"
                         for k, n in kinds.items())
        print(f"    rank {rank:<3} {start:9.3f} to {end:9.3f} s: {what}")


def compiled_arena(setup, config, dtype, work):
    """The largest per-rank arena of the compiled configuration, from
    triad-opt's memory report, in bytes (the model built by triad-gen)."""
    ir = os.path.join(work, "model.mlir")
    report = os.path.join(work, "memory.txt")
    generated_model(setup, ir, setup.batch, dtype)
    done = subprocess.run(
        [triad_opt(), ir,
         f"--triad-train-pipeline={pipeline_options(setup, config)}",
         f"--triad-memory-report=file={report}", "-o", os.devnull],
        capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[0]
    with open(report) as f:
        return max(p["arena"] for p in memory_report(f.read())), None


# What compiled_memory replaces in an evaluation.
MEMORY_FIELDS = ("fits", "memory", "state", "activations", "temporaries",
                 "memory_rank", "memory_by")


def search(setup, fixed, top, as_json, verify=0, dtype="bf16", simulate=10,
           memory=None):
    started = time.perf_counter()
    results, tried = [], 0
    configs = list(candidates(setup, fixed))
    if setup.costs:
        setup.costs.prefetch((c["tp"], c["sp"], c["microbatch"])
                             for c in configs)
    # Configurations whose cost report the compiler refuses, by the reason.
    unreported = {}
    for config in configs:
        tried += 1
        try:
            result = evaluate(setup, config, closed_memory=memory is None)
        except CalibrationError as error:
            unreported[str(error)] = unreported.get(str(error), 0) + 1
            continue
        if result and result["fits"]:
            results.append(dict(config, **result,
                                options=pipeline_options(setup, config)))
    # Fastest first; of equals, the smaller footprint.
    if tried == 0:
        model = setup.model
        fail(f"no configuration to search: tp must divide the attention heads "
             f"({model['heads']}) and key/value heads "
             f"({model.get('kv_heads', model['heads'])}) and the GPUs of a "
             f"node ({setup.cluster.per_node}), pp must be at most the layers "
             f"({model['layers']}), and dp x tp x pp the "
             f"{setup.cluster.count} GPUs")
    results.sort(key=lambda r: (round(r["step"], 6), r["memory"]))
    checked = len(results)
    if memory:
        # The compiler's memory, fastest first, until the table and the
        # simulation have enough configurations that fit.
        # In batches: the classes a batch needs are calibrated at once, for
        # the bounds (one sequence per microbatch), then for the
        # configurations the bounds leave.
        fitting, checked, batch = [], 0, 4 * (os.cpu_count() or 1)
        # Configurations the compiler refuses, by the reason.
        refused = {}
        limit = setup.cluster.memory - RESERVED_GIB * 2**30
        for start in range(0, len(results), batch):
            group = results[start:start + batch]
            memory.prefetch(memory.key(r, bound=True) for r in group)
            group = [r for r in group if r["microbatch"] == 1 or
                     bound_fits(memory, r, limit)]
            memory.prefetch(memory.key(r) for r in group)
            for r in group:
                try:
                    r = compiled_memory(memory, r)
                except CalibrationError as error:
                    refused.setdefault(str(error), 0)
                    refused[str(error)] += 1
                    continue
                if r["fits"]:
                    fitting.append(r)
            checked = start + len(results[start:start + batch])
            if len(fitting) >= max(top, simulate):
                break
        results = fitting[:max(top, simulate)]
        unreported.update(refused)
    for reason, count in unreported.items():
        print(f"triad-plan: note: skipped {count} configuration"
              f"{'s' if count > 1 else ''} the compiler refuses: {reason}",
              file=sys.stderr)
    # The best, re-timed on the compiler's schedule, action by action, and
    # ranked again.
    for i, r in enumerate(results[:simulate]):
        config = {k: r[k] for k in ("dp", "tp", "pp", "microbatch", "zero",
                                    "schedule", "virtual_stages", "sp",
                                    "recompute")}
        timed = evaluate(setup, config, simulate=True, closed_memory=False)
        results[i] = dict(r, **{k: v for k, v in timed.items()
                                if k not in MEMORY_FIELDS})
    results[:simulate] = sorted(
        results[:simulate], key=lambda r: (round(r["step"], 6), r["memory"]))
    seconds = time.perf_counter() - started
    if verify:
        # Compile in rank order until `verify` configurations fit by the
        # compiler's own memory report (at most 4 x verify compiles); the
        # table then shows those compiled, the ones that fit first.
        if "generator" not in setup.model:
            fail("--verify compiles the model: it needs triad-gen beside "
                 "triad-plan or on PATH")
        compiled = []
        with tempfile.TemporaryDirectory(prefix="triad-plan-") as work:
            for r in results[:4 * verify]:
                r["compiled"], r["compile_error"] = compiled_arena(
                    setup, r, dtype, work)
                compiled.append(r)
                if sum(1 for c in compiled
                       if fits_compiled(c, setup.cluster)) == verify:
                    break
        results = sorted(compiled, key=lambda r: not fits_compiled(
            r, setup.cluster)) + results[len(compiled):]
        top = max(top, len(compiled))
    model, cluster = setup.model, setup.cluster
    if as_json:
        print(json.dumps({"model": model, "gpus": cluster.count,
                          "searched": tried, "fit": len(results),
                          "checked": checked,
                          "memory_by": "compiler" if memory else
                          "closed form",
                          "calibration_compiles": memory.compiles if memory
                          else 0,
                          "seconds": seconds, "best": results[:top]},
                         indent=1))
        return
    print(f"{model['name']}: {parameters(model)}, batch {setup.batch} x "
          f"{model['seq']}, on {cluster.count} x {cluster.name} "
          f"({cluster.nodes} node{'s' if cluster.nodes > 1 else ''} of "
          f"{cluster.per_node})")
    print(f"searched {tried} configurations in {seconds:.2f} s; "
          f"{len(results)} fit in {cluster.memory / 2**30:.0f} GiB" + (
              f" among the fastest {checked} whose model state fits (memory "
              f"by the compiler, from {memory.compiles} calibration "
              "compiles)" if memory else " (memory by the closed form)") +
          (f"; time by the compiler's cost report ({setup.costs.compiles}"
           " compiles)" if setup.costs else "; time by the closed form"))
    if not results:
        print("none fits: more GPUs, a smaller batch or fewer layers")
        sys.exit(2)
    print(f"{'':>3} {'dp':>4} {'tp':>3} {'pp':>3} {'mb':>3} {'zero':>4} "
          f"{'schedule':<14} {'sp':<3} {'recompute':<9} {'step s':>8} "
          f"{'tokens/s':>10} {'TFLOP/s':>7} {'MFU':>6} {'GiB':>6} "
          f"{'bubble':>6} {'tp/pp/dp comm':>13}" +
          (f" {'compiled':>8}" if verify else ""))
    for rank, r in enumerate(results[:top], 1):
        schedule = r["schedule"] + (f" v{r['virtual_stages']}"
                                    if r["virtual_stages"] > 1 else "")
        print(f"{rank:>3} {r['dp']:>4} {r['tp']:>3} {r['pp']:>3} "
              f"{r['microbatch']:>3} {r['zero']:>4} {schedule:<14} "
              f"{'yes' if r['sp'] else 'no':<3} {r['recompute']:<9} "
              f"{r['step']:>8.3f} {r['tokens_per_s']:>10,.0f} "
              f"{r['tflops']:>7.1f} {100 * r['mfu']:>5.1f}% "
              f"{r['memory'] / 2**30:>6.1f} "
              f"{100 * r['bubble'] / r['step']:>5.1f}% "
              f"{comm_shares(r):>13}" + compiled_column(r, setup.cluster))
    if verify and not fits_compiled(results[0], setup.cluster):
        print("none of the compiled configurations fits by the compiler's "
              "memory report")
        sys.exit(2)
    print(f"best: --triad-train-pipeline='{results[0]['options']}'")
    if verify:
        print("compiled: the largest rank's arena in triad-opt's memory "
              f"report, GiB (fits with {RESERVED_GIB:g} GiB for the CUDA "
              "context); the compiled configurations that fit come first")


def comm_shares(r):
    """Each axis's communication time as a share of the step, percent:
    tensor parallelism's collectives, the pipeline's sends, data
    parallelism's collectives."""
    return "/".join(f"{100 * r[key] / r['step']:.0f}"
                    for key in ("tp_time", "pp_time", "dp_time")) + "%"


def fits_compiled(r, cluster):
    return r.get("compiled") is not None and r["compiled"] + \
        RESERVED_GIB * 2**30 <= cluster.memory


def compiled_column(r, cluster):
    if "compiled" not in r:
        return ""
    if r["compiled"] is None:
        return "  not compiled: " + r["compile_error"]
    over = "" if fits_compiled(r, cluster) else " (over)"
    return f" {r['compiled'] / 2**30:>8.1f}{over}"


def main():
    parser = argparse.ArgumentParser(
        prog="triad-plan", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    model = parser.add_argument_group("model")
    model.add_argument("--preset", help="a triad-gen preset")
    model.add_argument("--hf-config", help="a Hugging Face config.json")
    for name, what in (("layers", "transformer layers"),
                       ("hidden", "hidden size"), ("heads", "attention heads"),
                       ("seq", "sequence length"),
                       ("vocab", "vocabulary"),
                       ("ffn", "MLP inner size (default 4 x hidden)")):
        model.add_argument(f"--{name}", type=int,
                           help=what + " (overrides a preset's or config's)")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--gpu", default="h100-sxm",
                         help=f"one of {', '.join(GPUS)} (default h100-sxm)")
    cluster.add_argument("--device", metavar="FILE",
                         help="a measured device (JSON) instead of --gpu")
    cluster.add_argument("--gpus-per-node", type=int, default=8)
    cluster.add_argument("--nodes", type=int, default=1)
    cluster.add_argument("--nvlink", type=float,
                         help="NVLink bus bandwidth per GPU, GB/s (default: "
                         "the GPU's, as nccl-tests measure it)")
    cluster.add_argument("--ib", type=float, default=25.0,
                         help="InfiniBand GB/s per GPU (default 25: 200 Gb/s)")
    cluster.add_argument("--memory", type=float,
                         help="usable GiB per GPU (default: the GPU's)")
    training = parser.add_argument_group("training")
    training.add_argument("--batch", type=int, required=True,
                          help="global batch in sequences")
    training.add_argument("--dtype", choices=("bf16", "f16", "f32"),
                          default="bf16")
    training.add_argument("--grad-accumulation", choices=("f32", "param"),
                          default="f32",
                          help="gradients summed and reduced in f32 (the "
                          "default) or in the parameters' 16 bits, as the "
                          "train pipeline's option of that name")
    training.add_argument("--implementation",
                          choices=("triad", "megatron-2021"), default="triad",
                          help="triad (the default): fused attention, dropout "
                          "masks regenerated; megatron-2021: attention scores "
                          "and dropout masks kept, as in Narayanan et al.")
    for name in ("tp", "pp", "microbatch", "zero"):
        training.add_argument(f"--{name}", type=int, help=f"fix {name}")
    output = parser.add_argument_group("output")
    output.add_argument("--top", type=int, default=10,
                        help="rows of the table (default 10)")
    output.add_argument("--json", action="store_true")
    output.add_argument("--simulate", type=int, default=10, metavar="N",
                        help="re-time the N best on the compiler's own "
                        "pipeline schedule, action by action, and rank them "
                        "again (default 10; --explain always does)")
    output.add_argument("--verify", type=int, default=0, metavar="N",
                        help="compile the best with triad-opt, in rank "
                        "order, until N fit by the largest rank's arena in "
                        "its memory report, and rank those first (--preset "
                        "or --hf-config)")
    output.add_argument("--memory-by", choices=("compiler", "closed-form"),
                        help="each rank's memory as the compiler plans it, "
                        "predicted from a few compiles of the model cut "
                        "short (the default for --preset and --hf-config "
                        "with --implementation triad), or by the closed "
                        "form (the ZeRO paper's state, Korthikanti et al.'s "
                        "activations)")
    output.add_argument("--time-by", choices=("compiler", "closed-form"),
                        help="each layer's time from the compiler's cost "
                        "report (its ops' FLOPs, bytes and product shapes "
                        "as a rank runs them, one compile of a layer per tp "
                        "and sp; the default where triad-gen builds the "
                        "model), or by the closed form from the model's "
                        "sizes")
    output.add_argument("--explain", metavar="CONFIG",
                        help='one configuration, e.g. "dp=8 tp=4 pp=2 '
                        'microbatch=1 zero=1 schedule=1f1b recompute=full"')
    args = parser.parse_args()

    if args.preset and args.hf_config:
        fail("give --preset or --hf-config, not both")
    for name in ("gpus_per_node", "nodes", "batch", "top"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be positive")
    if args.dtype == "f32" and args.grad_accumulation == "param":
        fail("--grad-accumulation param is for 16-bit models")
    the_model = model_from_generator(args) if (args.preset or args.hf_config) \
        else model_from_sizes(args)
    setup = Setup(the_model, Cluster(args), args.batch, args.dtype,
                  args.grad_accumulation, args.implementation)
    compiled = "generator" in the_model and args.implementation == "triad"
    if args.memory_by == "compiler" and not compiled:
        fail("--memory-by compiler predicts Triad's own plans: it needs "
             "--implementation triad and triad-gen beside triad-plan or on "
             "PATH")
    compiled = compiled and args.memory_by != "closed-form"
    if args.time_by == "compiler" and "generator" not in the_model:
        fail("--time-by compiler reads the compiler's cost report: it needs "
             "triad-gen beside triad-plan or on PATH")
    with tempfile.TemporaryDirectory(prefix="triad-plan-") as work:
        memory = CompiledMemory(setup, args.dtype, work) if compiled else None
        if "generator" in the_model and args.time_by != "closed-form":
            setup.costs = CompiledCosts(setup, args.dtype, work)
        if args.explain:
            config = parse_config(args.explain)
            total = config["dp"] * config["tp"] * config["pp"]
            if total != setup.cluster.count:
                fail(f"dp x tp x pp is {total}, not the cluster's "
                     f"{setup.cluster.count} GPUs")
            explain(setup, config, args.json, memory)
            return
        fixed = {k: getattr(args, k) for k in ("tp", "pp", "microbatch",
                                                "zero")
                 if getattr(args, k) is not None}
        search(setup, fixed, args.top, args.json, args.verify, args.dtype,
               args.simulate, memory)


if __name__ == "__main__":
    main()
