#!/usr/bin/env python3
"""Summarizes where a merged triad-run Chrome trace of a pipeline waits for
its transfers, from the order of its events (never their durations), for
FileCheck. Per rank (the trace's pid): the receives waited for, by the
category of the call that waited ("forward", "backward"; "transfer" for a
transfer call, "step end" outside the calls), and the sends; then, of the
activations the rank forwards (send-act S.i) after posting the receive of
the next microbatch (recv-act S.i+1), how many it started sending before
that receive completed. A wait names the action that started what it waited
for ("recv-act1.2<0, instruction 0")."""
import json
import re
import sys

events = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
          if e.get("ph") == "X"]
CALLS = ("forward", "backward", "transfer", "optimizer")

for rank in sorted({e["pid"] for e in events}):
    mine = [e for e in events if e["pid"] == rank]
    calls = [e for e in mine if e["cat"] in CALLS]
    # The action that started each call, and each wait's.
    started = {e["name"].split(" ")[0]: e for e in calls}
    waits = {}
    for e in mine:
        if e["cat"] == "instruction" and e["name"] in ("wait Send", "wait Recv"):
            waits[e["args"]["operands"].split(",")[0]] = e

    def waiter(wait):
        for call in calls:
            if call["ts"] <= wait["ts"] and \
                    wait["ts"] + wait["dur"] <= call["ts"] + call["dur"]:
                return call["cat"]
        return "step end"

    for kind in ("recv", "send"):
        where = {}
        for action, wait in waits.items():
            if action.startswith(kind + "-"):
                category = waiter(wait)
                where[category] = where.get(category, 0) + 1
        print(f"rank {rank}: {kind}s waited for in " + (", ".join(
            f"{category} {count}" for category, count in sorted(where.items()))
            or "none"))

    posted = ahead = 0
    for action, call in started.items():
        sent = re.fullmatch(r"send-act(\d+)\.(\d+)>\d+", action)
        if not sent:
            continue
        stage, microbatch = sent.group(1), int(sent.group(2))
        following = [a for a in started
                     if re.fullmatch(rf"recv-act{stage}\.{microbatch + 1}<\d+", a)]
        if not following or started[following[0]]["ts"] > call["ts"]:
            continue
        posted += 1
        wait = waits[following[0]]
        ahead += call["ts"] < wait["ts"] + wait["dur"]
    print(f"rank {rank}: forwarded after the next receive was posted {posted}, "
          f"before it completed {ahead}")
