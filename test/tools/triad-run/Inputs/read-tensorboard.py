"""Reads triad-run's TensorBoard events with TensorBoard's own reader and
compares them with the metrics file: prints the scalar tags, the steps, and
whether the losses agree (as float32)."""

import json
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator


def f32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


events = event_accumulator.EventAccumulator(sys.argv[1])
events.Reload()
tags = sorted(events.Tags()["scalars"])
print("tags: " + " ".join(tags))
loss = {e.step: e.value for e in events.Scalars("loss")}
mean = {e.step: e.value for e in events.Scalars("loss_mean")}
print("steps: " + " ".join(str(s) for s in sorted(loss)))
records = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
same = all(loss[r["step"]] == f32(r["loss"]) and
           mean[r["step"]] == f32(r["loss_mean"]) for r in records)
print(f"loss and loss_mean agree with the metrics: {same and len(records) == len(loss)}")
