#!/usr/bin/env python3
"""Summarizes the device spans of a triad-run trace (--trace-device), per
rank (the trace's pid), for FileCheck:

  rank R: N instructions, N device spans, each naming its call: yes
  rank R: OP K on the communication stream, M overlapping later kernels of their call

The first line counts the host's instruction events (not the waits) and the
device spans ("device" on the GPU's compute stream, "device communication"
on its communication stream); one span per instruction, but for a receive
staged through host memory (--comm mpi), which is copied to the GPU when it
is waited for and has none. The second, for each
collective or transfer OP on the communication stream: how many of its spans
overlap in time a span on the compute stream of an instruction its call
issued after it (a gradient's reduce-scatter running while the backward pass
goes on), read from the device's own times."""
import json
import sys

events = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
          if e.get("ph") == "X"]
DEVICE = ("device", "device communication")

for rank in sorted({e["pid"] for e in events}):
    mine = [e for e in events if e["pid"] == rank]
    instructions = sum(1 for e in mine if e["cat"] == "instruction"
                       and not e["name"].startswith("wait "))
    spans = [e for e in mine if e["cat"] in DEVICE]
    named = all("call" in e.get("args", {}) and
                e["args"].get("instruction", -1) >= 0 for e in spans)
    print(f"rank {rank}: {instructions} instructions, {len(spans)} device "
          f"spans, each naming its call: {'yes' if named and spans else 'no'}")
    if not named:
        continue
    compute = [e for e in spans if e["cat"] == "device"]
    moves = [e for e in spans if e["cat"] == "device communication"]
    for op in sorted({e["name"] for e in moves}):
        mine_op = [e for e in moves if e["name"] == op]
        overlapping = 0
        for c in mine_op:
            call, index = c["args"]["call"], c["args"]["instruction"]
            begin, end = c["ts"], c["ts"] + c["dur"]
            overlapping += any(
                d["args"]["call"] == call and d["args"]["instruction"] > index
                and d["ts"] < end and begin < d["ts"] + d["dur"]
                for d in compute)
        print(f"rank {rank}: {op} {len(mine_op)} on the communication "
              f"stream, {overlapping} overlapping later kernels of their call")
