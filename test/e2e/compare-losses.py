#!/usr/bin/env python3
"""Checks the law of DESIGN.md section 6 on two triad-run metrics files:
the same steps, with losses (and gradient norms) equal within a relative
tolerance, and (with the gradient norms) the same f16 steps skipped for
overflow. Prints the largest relative difference; exits 1 on a mismatch.
With --mean-of-last N it compares, per key, the mean over the last N steps
(a smoothed curve) instead of every step."""

import argparse
import json
import sys


def read(path):
    steps = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not JSON: {e}")
            if "step" in record and "loss" in record:
                steps[record["step"]] = record
    if not steps:
        sys.exit(f"{path}: no step with a loss")
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference")
    parser.add_argument("candidate")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--keys", default="loss,grad_norm")
    parser.add_argument("--mean-of-last", type=int, default=0, metavar="N")
    args = parser.parse_args()
    reference, candidate = read(args.reference), read(args.candidate)
    if sorted(reference) != sorted(candidate):
        sys.exit(f"steps differ: {sorted(reference)} vs {sorted(candidate)}")
    if args.mean_of_last > 0:
        last = sorted(reference)[-args.mean_of_last:]
        if len(last) < args.mean_of_last:
            sys.exit(f"--mean-of-last {args.mean_of_last}: only {len(last)} "
                     "steps")

        def mean(steps):
            record = {}
            for key in args.keys.split(","):
                values = [steps[step].get(key) for step in last]
                if None not in values:
                    record[key] = sum(values) / len(values)
            return {f"{last[0]}-{last[-1]} (mean)": record}
        reference, candidate = mean(reference), mean(candidate)
    worst, failures = 0.0, []
    for step in sorted(reference):
        # An f16 step skipped for overflow has no gradient norm: where the
        # norms are compared, the law asks that both runs skip it, or
        # neither (--keys loss compares the losses alone).
        skipped = (reference[step].get("skipped") is True,
                   candidate[step].get("skipped") is True)
        if skipped[0] != skipped[1] and "grad_norm" in args.keys.split(","):
            failures.append(f"step {step}: skipped (overflow) in the "
                            f"{'reference' if skipped[0] else 'candidate'} "
                            "only")
            continue
        for key in args.keys.split(","):
            a, b = reference[step].get(key), candidate[step].get(key)
            if a is None and b is None and all(skipped):
                continue
            if a is None or b is None:
                failures.append(f"step {step}: {key} missing")
                continue
            rel = abs(a - b) / max(abs(a), 1e-30)
            worst = max(worst, rel)
            if rel > args.rtol:
                failures.append(f"step {step}: {key} {a!r} vs {b!r} "
                                f"(relative difference {rel:.3g})")
    print(f"{len(reference)} steps, largest relative difference {worst:.3g} "
          f"(tolerance {args.rtol:g})")
    for failure in failures:
        print("MISMATCH " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
