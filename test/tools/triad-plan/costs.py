#!/usr/bin/env python3
"""Holds triad-plan's time model to the compiler's cost report, for every
seed model.

triad-plan times each layer op by op from --triad-cost-report (the ops'
CostOpInterface after the partition: a rank's FLOPs, bytes and product
shapes), compiling the model cut to one layer per tp, sp and microbatch
size, and taking the largest microbatches on the line through two smaller
ones (CompiledCosts). For each preset, at tp 1 and at the largest tp the
model allows in a node (with and without sequence parallelism), this
checks:

- the line: the report at 8 sequences a microbatch as the planner draws it
  is the compiled one, op for op (FLOPs, bytes, product shapes);
- the FLOPs: a layer's forward products are 2 per layer parameter and
  token on a rank's share of them (within 1%: norms and biases are not
  products), its backward's twice that, attention's forward 4 s h per
  token (a rank's heads) and its backward 2.5 times that.

Usage: costs.py TRIAD_PLAN
"""

import os
import sys
import tempfile
from importlib.machinery import SourceFileLoader

# (Not tiny: at width 64 its norms and biases are 2% of a layer.)
PRESETS = ("gpt2-small", "llama2-7b", "gpt-neox-20b",
           "codegeex-13b", "glm-130b", "opt-175b", "bloom-176b",
           "mt-nlg-530b")


class Args:
    """triad-plan's command line, as its functions read it."""

    def __init__(self, preset):
        for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn",
                     "hf_config", "device", "nvlink", "memory"):
            setattr(self, name, None)
        self.preset, self.gpu, self.nodes = preset, "h100-sxm", 1
        self.gpus_per_node, self.ib = 8, 25.0


def close(a, b, tolerance):
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1.0)


def check_line(plan, costs, tp, sp):
    """The report at 8 sequences drawn on the line against the compiled
    one; returns the number of ops compared, or None on a difference."""
    # The sizes the line goes through.
    costs.prefetch([(tp, sp, b) for b in costs.COMPILED])
    drawn = costs.extrapolate(tp, sp, 8)
    if drawn is None:
        print(f"  tp={tp} sp={sp}: the compiled sizes' ops differ: 8 "
              "sequences would be compiled, not drawn")
        return None
    compiled = costs.compile(tp, sp, 8)
    if sorted(drawn) != sorted(compiled):
        print(f"  tp={tp} sp={sp}: parts differ: {sorted(drawn)} against "
              f"{sorted(compiled)}")
        return None
    compared = 0
    for part in drawn:
        pairs = plan.matched_ops(drawn[part], compiled[part])
        if pairs is None:
            print(f"  tp={tp} sp={sp}: the ops of '{part}' differ")
            return None
        for a, b in pairs:
            for key in a:
                if isinstance(a[key], (int, float)) and \
                        not close(a[key], b[key], 1e-9):
                    print(f"  tp={tp} sp={sp}: '{part}' {a['name']} {key}: "
                          f"drawn {a[key]}, compiled {b[key]}")
                    return None
            compared += 1
    return compared


def check_flops(model, parts, tp, b):
    """A layer's FLOPs against the model's sizes; returns the problems."""
    tokens = model["seq"] * b
    h, s = model["hidden"], model["seq"]
    forward, backward = parts["transformer 0"], parts["transformer 0 backward"]

    def total(ops, kind):
        return sum(op["flops"] for op in ops if op.get("kind") == kind)

    problems = []
    products = total(forward, "product")
    expected = 2 * tokens * model["per_layer"] / tp
    if not close(products, expected, 0.01):
        problems.append(f"forward products {products:.4g} FLOPs, the "
                        f"model's 2 per parameter and token {expected:.4g}")
    if not close(total(backward, "product"), 2 * products, 1e-9):
        problems.append(f"backward products {total(backward, 'product'):.4g}"
                        f" FLOPs, not twice the forward's {products:.4g}")
    attention = total(forward, "attention")
    if not close(attention, 4 * tokens * s * h / tp, 1e-9):
        problems.append(f"attention {attention:.4g} FLOPs, not 4 s h per "
                        f"token {4 * tokens * s * h / tp:.4g}")
    if not close(total(backward, "attention_grad"), 2.5 * attention, 1e-9):
        problems.append("attention's backward is not 2.5 times its forward")
    return problems


def main():
    tool = sys.argv[1]
    plan = SourceFileLoader("triad_plan", tool).load_module()
    ok, compared = True, 0
    with tempfile.TemporaryDirectory(prefix="triad-plan-costs-") as work:
        for preset in PRESETS:
            args = Args(preset)
            model = plan.model_from_generator(args)
            setup = plan.Setup(model, plan.Cluster(args), 64, "bf16", "f32",
                               "triad")
            here = os.path.join(work, preset)
            os.makedirs(here)
            costs = plan.CompiledCosts(setup, "bf16", here)
            largest = max(t for t in (1, 2, 4, 8)
                          if model["heads"] % t == 0 and
                          model["kv_heads"] % t == 0)
            problems = []
            for tp, sp in {(1, False), (largest, False), (largest, True)}:
                if sp and tp == 1:
                    continue
                n = check_line(plan, costs, tp, sp)
                if n is None:
                    ok = False
                    continue
                compared += n
                for b in (1, 2, 8):
                    problems += [f"tp={tp} sp={sp} microbatch {b}: {p}"
                                 for p in check_flops(
                                     model, costs.parts(tp, sp, b), tp, b)]
            print(f"{preset}: tp 1 and {largest}: "
                  f"{'ok' if not problems else 'FAILED'}")
            for p in problems:
                print("  " + p)
            ok = ok and not problems
    print(f"{compared} ops drawn on the line as compiled; "
          f"{'all as the model counts' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
