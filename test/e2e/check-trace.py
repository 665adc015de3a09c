#!/usr/bin/env python3
"""Summarizes a merged triad-run Chrome trace for FileCheck: per rank (the
trace's pid), the number of complete events of each category over the
steps, and for the idle events the share of the step time they cover and
the actions they waited on in the first step (names are "idle (<actions>)");
and whether the ranks' clocks line up: every step ends in collectives over
all ranks, so the ranks' ends of each step lie within a few milliseconds of
one another on one timeline (20 ms allowed). Fails when an idle event
overlaps a compute call of its rank."""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
ranks = sorted({e["pid"] for e in events if e.get("ph") == "X"})
for rank in ranks:
    mine = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
    counts = {}
    for e in mine:
        counts[e["cat"]] = counts.get(e["cat"], 0) + 1
    steps = [e for e in mine if e["cat"] == "step"]
    idle = [e for e in mine if e["cat"] == "idle"]
    compute = [e for e in mine if e["cat"] in ("forward", "backward", "optimizer")]
    for i in idle:
        for c in compute:
            if i["ts"] < c["ts"] + c["dur"] and c["ts"] < i["ts"] + i["dur"]:
                sys.exit(f"rank {rank}: {i['name']} overlaps {c['name']}")
    first = steps[0]
    waited = [i["name"] for i in idle
              if first["ts"] <= i["ts"] < first["ts"] + first["dur"]]
    share = sum(i["dur"] for i in idle) / sum(s["dur"] for s in steps)
    print(f"rank {rank}: " + " ".join(
        f"{cat} {counts.get(cat, 0)}"
        for cat in ("step", "forward", "backward", "transfer", "optimizer",
                    "idle")) + f" | idle share {'positive' if share > 0 else 'zero'}")
    print(f"rank {rank} step 1 idle: " + ", ".join(waited))

ends = {}
for e in events:
    if e.get("ph") == "X" and e["cat"] == "step":
        ends.setdefault(e["name"], []).append(e["ts"] + e["dur"])
spread = max(max(v) - min(v) for v in ends.values() if len(v) == len(ranks))
print("step ends across ranks: " +
      ("within 20 ms" if spread <= 20000 else f"{spread / 1000:.1f} ms apart"))
