#!/usr/bin/env python3
"""Holds triad-plan's memory to the compiler's, for every seed model.

triad-plan predicts each pipeline rank's arena from a few calibration
compiles of the model cut short (CompiledMemory). For each preset but
`tiny` (whose arenas are kilobytes, where each buffer's 64-byte alignment
is the error), on the cluster and batch of its published run, this draws
one configuration of each kind (no pipeline; 1F1B, ZB-H1, interleaved and
GPipe schedules) among those whose model state fits twice over, compiles
it with triad-opt, and compares the largest rank's arena in the memory
report with the prediction: within 2% or the script fails.

It also compiles the best 5 configurations of a search (GPT-NeoX-20B on
96 A100-40GB) and checks that each fits; and it holds slot_copies, the
planner's copy of the lowering's rule for how many copies of each kept
storage a stage needs, to the compiler's on every schedule: each slotted
buffer of a compiled plan against the copies slot_copies gives the calls
that touch it.

Usage: memory.py TRIAD_PLAN
"""

import json
import os
import random
import subprocess
import sys
import tempfile
from importlib.machinery import SourceFileLoader

# preset, GPU, nodes of 8, global batch (the published runs of the seed
# setups; Llama 2 7B and GPT-2 medium on one node).
MODELS = [
    ("gpt2-small", "h100-sxm", 1, 512),
    ("gpt2-medium", "h100-sxm", 1, 512),
    ("llama2-7b", "h100-sxm", 1, 512),
    ("gpt-neox-20b", "a100-40gb", 12, 1536),
    ("codegeex-13b", "a100-40gb", 192, 1536),
    ("glm-130b", "a100-40gb", 96, 4224),
    ("opt-175b", "a100-80gb", 124, 2048),
    ("bloom-176b", "a100-80gb", 48, 2048),
    ("mt-nlg-530b", "a100-80gb", 560, 1920),
]
KINDS = ("single", "1f1b", "zb-h1", "interleaved", "gpipe")
LIMIT = 2.0  # percent


class Args:
    """triad-plan's command line, as its functions read it."""

    def __init__(self, preset, gpu, nodes):
        for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn",
                     "hf_config", "device", "nvlink", "memory"):
            setattr(self, name, None)
        self.preset, self.gpu, self.nodes = preset, gpu, nodes
        self.gpus_per_node, self.ib = 8, 25.0


def kind(config):
    return "single" if config["pp"] == 1 else config["schedule"]


def check_models(plan, work):
    worst = 0.0
    for preset, gpu, nodes, batch in MODELS:
        args = Args(preset, gpu, nodes)
        setup = plan.Setup(plan.model_from_generator(args), plan.Cluster(args),
                           batch, "bf16", "f32", "triad")
        # (Each model's files apart: they are named by layers and batch.)
        here = os.path.join(work, preset)
        os.makedirs(here)
        memory = plan.CompiledMemory(setup, "bf16", here)
        drawn = random.Random(preset)
        pool = {k: [] for k in KINDS}
        for config in plan.candidates(setup, {}):
            result = plan.evaluate(setup, config, closed_memory=False)
            if result and result["state"] < 2 * setup.cluster.memory:
                pool[kind(config)].append(config)
        for k in KINDS:
            if not pool[k]:
                continue
            config = drawn.choice(pool[k])
            predicted = memory.arena(config)["arena"]
            compiled, error = plan.compiled_arena(setup, config, "bf16", here)
            if compiled is None:
                print(f"{preset}: {plan.describe(config)} did not compile: "
                      f"{error}")
                return False
            diff = 100 * (predicted / compiled - 1)
            worst = max(worst, abs(diff))
            print(f"{preset:13} {plan.describe(config):88} predicted "
                  f"{predicted / 2**30:8.2f} GiB compiled "
                  f"{compiled / 2**30:8.2f} GiB {diff:+6.2f}%")
    print(f"largest difference {worst:.2f}% (limit {LIMIT}%)")
    return worst <= LIMIT


def check_search(plan, tool):
    """What the search proposes fits: GPT-NeoX-20B on 96 A100-40GB, its
    best 5 compiled whole (--verify), every one within the card."""
    done = subprocess.run(
        [tool, "--preset", "gpt-neox-20b", "--gpu", "a100-40gb", "--nodes",
         "12", "--batch", "1536", "--top", "5", "--json"],
        capture_output=True, text=True, check=True)
    best = json.loads(done.stdout)["best"]
    args = Args("gpt-neox-20b", "a100-40gb", 12)
    setup = plan.Setup(plan.model_from_generator(args), plan.Cluster(args),
                       1536, "bf16", "f32", "triad")
    ok = len(best) == 5
    with tempfile.TemporaryDirectory(prefix="triad-plan-search-") as work:
        for r in best:
            compiled, error = plan.compiled_arena(setup, r, "bf16", work)
            fits = compiled is not None and plan.fits_compiled(
                dict(r, compiled=compiled), setup.cluster)
            ok = ok and fits
            print(f"proposed {r['options']}: predicted "
                  f"{r['memory'] / 2**30:.2f} GiB, compiled "
                  f"{(compiled or 0) / 2**30 + plan.RESERVED_GIB:.2f} GiB "
                  f"with the CUDA context: {'fits' if fits else 'DOES NOT FIT'}")
    return ok


def check_copies(plan, work):
    """slot_copies against the lowering on a small model, every schedule."""
    gen, opt = plan.triad_gen(), plan.triad_opt()
    ir = os.path.join(work, "small.mlir")
    subprocess.run([gen, "--preset", "tiny", "--layers", "8", "--batch", "16",
                    "-o", ir], check=True)
    mismatches = checked = 0
    for schedule, pp, m, v in (("1f1b", 4, 8, 1), ("1f1b", 2, 16, 1),
                               ("zb-h1", 4, 16, 1), ("gpipe", 4, 8, 1),
                               ("interleaved", 4, 8, 2),
                               ("interleaved", 2, 16, 4)):
        options = f"dp={16 // m} pp={pp} microbatches={m} schedule={schedule}"
        if v > 1:
            options += f" virtual-stages={v}"
        rt = subprocess.run([opt, ir, f"--triad-train-pipeline={options}"],
                            capture_output=True, text=True, check=True).stdout
        actions = plan.schedule_actions(schedule, pp, m, v)
        for rank, storages in enumerate(plan.kept_storages(rt)):
            for stage, kinds, _, count in storages.values():
                predicted = plan.slot_copies(actions[rank], stage, [kinds])
                checked += 1
                if predicted[kinds] != count:
                    mismatches += 1
                    print(f"{options}: rank {rank} stage {stage} "
                          f"{sorted(kinds)}: slot_copies "
                          f"{predicted[kinds]}, the compiler {count}")
    print(f"copies of {checked} kept storages on 6 schedules: "
          f"{mismatches} differ")
    return mismatches == 0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    plan = SourceFileLoader("triad_plan", sys.argv[1]).load_module()
    with tempfile.TemporaryDirectory(prefix="triad-plan-memory-") as work:
        ok = check_copies(plan, work)
        ok = check_models(plan, work) and ok
    ok = check_search(plan, sys.argv[1]) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
