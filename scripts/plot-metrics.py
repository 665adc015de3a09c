#!/usr/bin/python3
"""Draws a triad-run metrics file (--metrics, JSON lines) to a PNG: the loss
per logged step with its interval mean, the learning rate, and the
throughput (tokens/s over each interval, and TFLOP/s per rank on a second
axis), against the step.

  /usr/bin/python3 scripts/plot-metrics.py out/metrics.jsonl out/metrics.png

Uses Debian's python3-matplotlib (scripts/setup.sh installs it); give
several metrics files to draw their runs on the same axes, labelled by file
name.
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    records = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    sys.exit(f"plot-metrics: {path}:{number}: not JSON: {error}")
                if "step" in record:
                    records.append(record)
    except OSError as error:
        sys.exit(f"plot-metrics: cannot read {path}: {error.strerror}")
    if not records:
        sys.exit(f"plot-metrics: {path} has no step records")
    return records


def series(records, key):
    points = [(r["step"], r[key]) for r in records
              if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", help="triad-run --metrics files")
    parser.add_argument("png", help="the picture to write")
    args = parser.parse_args()
    if not args.png.endswith(".png"):
        parser.error(f"the output must be a .png file, got '{args.png}'")

    figure, (loss_axis, lr_axis, speed_axis) = plt.subplots(
        3, 1, sharex=True, figsize=(8, 9))
    flops_axis = speed_axis.twinx()
    for path in args.metrics:
        records = read(path)
        name = os.path.basename(path)
        steps, loss = series(records, "loss")
        loss_axis.plot(steps, loss, ".", markersize=3, alpha=0.5,
                       label=f"{name}: loss")
        steps, mean = series(records, "loss_mean")
        if steps:
            loss_axis.plot(steps, mean, "-", label=f"{name}: mean since the "
                           "previous record")
        steps, lr = series(records, "lr")
        lr_axis.plot(steps, lr, "-", label=name)
        key = ("interval_tokens_per_s" if any(
            "interval_tokens_per_s" in r for r in records) else "tokens_per_s")
        steps, speed = series(records, key)
        speed_axis.plot(steps, speed, "-", label=f"{name}: tokens/s")
        steps, tflops = series(records, "tflops")
        if steps:
            flops_axis.plot(steps, tflops, ":", color="C3",
                            label=f"{name}: TFLOP/s")
    loss_axis.set_ylabel("loss")
    loss_axis.legend(fontsize="small")
    lr_axis.set_ylabel("learning rate")
    lr_axis.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    speed_axis.set_ylabel("tokens/s")
    flops_axis.set_ylabel("TFLOP/s per rank")
    speed_axis.set_xlabel("step")
    lines = speed_axis.get_legend_handles_labels()
    more = flops_axis.get_legend_handles_labels()
    speed_axis.legend(lines[0] + more[0], lines[1] + more[1],
                      fontsize="small")
    for axis in (loss_axis, lr_axis, speed_axis):
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(args.png, dpi=100)
    print(f"plot-metrics: wrote {args.png} ({sum(len(read(p)) for p in args.metrics)} records)")


if __name__ == "__main__":
    main()
