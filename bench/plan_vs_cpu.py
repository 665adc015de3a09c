#!/usr/bin/env python3
"""triad-plan's step-time predictions against Triad's own CPU runs.

This machine's CPU is measured as a device, from traces of a small
calibration model (2 layers of width 256, not the model predicted): the
matrix-product rate of one rank on one core (the FLOPs of every Matmul
instruction over their time; OpenBLAS reaches it from width 256 on, so the
device has no fall-off with width), attention's rate (triad-plan's count
of its FLOPs over the Attention instructions' time), an effective memory
bandwidth for every other instruction (triad-plan's element-wise and
optimizer bytes over their time), and MPI over shared memory (the
all-reduces of a dp2 run: the bus bandwidth of the gradients' all-reduce
and the latency of a 17-float one). triad-plan then predicts
the step of the `mid` model (6 layers of width 384; bench/README.md) on 1,
2 and 4 ranks across dp, tp and pp (--explain with that device), and
triad-run measures it under mpirun, one OpenMP thread per rank. 4 ranks
share the 2 cores: the device's `cores` field tells triad-plan, which then
spreads the ranks' busy time over the cores (a rank idle in the pipeline's
bubble leaves its core to another).

Usage: python3 bench/plan_vs_cpu.py [--build build] [--steps 6] [--check]

With --check it exits non-zero when a prediction is more than 25% from the
measured step. A benchmark, not a test: timings move with the machine's
load.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from scale import option  # the same key=value reading of pipeline options

CALIBRATION = ["--preset", "tiny", "--layers", "2", "--hidden", "256",
               "--heads", "4", "--ffn", "1024", "--vocab", "256", "--seq", "128",
               "--batch", "8"]
MID = ["--preset", "tiny", "--layers", "6", "--hidden", "384", "--heads", "6",
       "--ffn", "1536", "--vocab", "256", "--seq", "256", "--batch", "8"]
MESHES = [("1 rank", ""), ("dp2", "dp=2"), ("tp2", "tp=2"),
          ("pp2", "pp=2 microbatches=2"), ("dp2 x tp2", "dp=2 tp=2"),
          ("dp2 x pp2", "dp=2 pp=2 microbatches=2"),
          ("tp2 x pp2", "tp=2 pp=2 microbatches=2")]
CORES = 2
MAX_ERROR = 0.25


def run(command, env=None, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True,
                          env=env, **kwargs)
    if done.returncode != 0:
        sys.exit(f"plan_vs_cpu: {' '.join(command)} failed:\n{done.stderr}")
    return done.stdout


def environment():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def ranks_of(options):
    return (int(option(options, "dp", 1)) * int(option(options, "tp", 1)) *
            int(option(options, "pp", 1)))


def compile_plan(tools, model, options, work, name):
    ir = os.path.join(work, name + ".mlir")
    rt = os.path.join(work, name + ".rt.mlir")
    plan = os.path.join(work, name + ".plan")
    run([tools["triad-gen"], *model, "-o", ir])
    run([tools["triad-opt"], ir, f"--triad-train-pipeline={options} "
         "decay-steps=0", "-o", rt])
    run([tools["triad-translate"], "--export-plan", rt, "-o", plan])
    return plan


def train(tools, plan, ranks, corpus, steps, work, trace=None):
    """The median step time (s) of steps 2.. of a run, and its trace."""
    metrics = os.path.join(work, "metrics.jsonl")
    # Each rank pinned to a core, rank r on core (r xor r/2) mod CORES: the
    # neighbouring ranks of a tensor-parallel pair on two cores (so that
    # neither waits for the other to be scheduled), and each core holding
    # one rank of each pipeline stage (ranks 0 and 3, 1 and 2), which take
    # turns. Left to the scheduler, 4 ranks on 2 cores ran some runs' steps
    # 40% slower than others (dp2 x pp2 and tp2 x pp2 at 1.0-1.1 s instead
    # of 0.72-0.76); bound to cores in rank order, dp2 x pp2 always did.
    pin = ('r=${OMPI_COMM_WORLD_RANK:-0}; '
           f'exec taskset -c $(( (r ^ (r >> 1)) % {CORES} )) "$0" "$@"')
    command = ["mpirun", "-np", str(ranks), "sh", "-c", pin,
               tools["triad-run"], plan,
               "--data", corpus, "--steps", str(steps), "--metrics", metrics,
               "--log_every", "1"]
    if trace:
        command += ["--trace", trace, "--trace_steps", f"2:{steps}"]
    run(command, env=environment())
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    times = [r["step_seconds"] for r in records if r["step"] >= 2]
    return statistics.median(times)


def events(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def elements(shape):
    count = 1
    for n in shape.split(","):
        count *= int(n)
    return count


def calibrate(tools, corpus, steps, work):
    """This CPU as a triad-plan device, from a calibration model's trace:
    the layers' products by their FLOPs and time, attention by triad-plan's
    count of its FLOPs and the Attention instructions' time, and every
    other instruction as triad-plan's element-wise and optimizer bytes over
    their time (an effective memory bandwidth)."""
    plan = compile_plan(tools, CALIBRATION, "", work, "calibration")
    trace = os.path.join(work, "calibration.trace.json")
    train(tools, plan, 1, corpus, steps, work, trace)
    flops = matmul = attention = other = 0.0
    traced_steps = 0
    for e in events(trace):
        if e.get("cat") == "step":
            traced_steps += 1
        if e.get("cat") != "instruction":
            continue
        took = e["dur"] * 1e-6
        if e["name"] == "Matmul":
            m = re.match(r"(\d+)x(\d+)\S* \. \d+x(\d+)\S*, batch (\d+)",
                         e["args"]["operands"])
            rows, depth, columns, batch = map(int, m.groups())
            flops += 2.0 * rows * depth * columns * batch
            matmul += took
        elif e["name"] in ("Attention", "AttentionGrad"):
            attention += took
        else:
            other += took
    rate = flops / matmul
    provisional = {"name": "provisional", "bf16": rate / 1e12,
                   "f32": rate / 1e12, "memory": 8, "hbm": 1, "nvlink": 1,
                   "product_efficiency": 1.0, "product_half": 0,
                   "attention_half_head": 0, "attention_half_seq": 0}
    provisional_file = os.path.join(work, "provisional.json")
    with open(provisional_file, "w") as f:
        json.dump(provisional, f)
    work_per_step = json.loads(run(
        [tools["triad-plan"], *CALIBRATION, "--device", provisional_file,
         "--gpus-per-node", "1", "--dtype", "f32", "--memory-by",
         "closed-form", "--explain", "dp=1 tp=1 pp=1 microbatch=8",
         "--json"]))["work"]
    attention_rate = work_per_step["attention_flops"] * traced_steps / attention
    bandwidth = (work_per_step["elementwise_bytes"] +
                 work_per_step["optimizer_bytes"]) * traced_steps / other

    dp2 = compile_plan(tools, CALIBRATION, "dp=2", work, "calibration-dp2")
    trace = os.path.join(work, "calibration-dp2.trace.json")
    train(tools, dp2, 2, corpus, steps, work, trace)
    large, small = [], []
    for e in events(trace.replace(".json", ".rank0.json")):
        if e.get("name") != "AllReduce":
            continue
        count = elements(re.search(r"f32\[([\d,]+)\]",
                                   e["args"]["operands"]).group(1))
        (large if count > 1 << 16 else small).append((count, e["dur"] * 1e-6))
    # Two ranks: a ring all-reduce is 2 steps of half the bytes each.
    latency = min(t for _, t in small) / 2
    count, took = min(large, key=lambda x: x[1] / x[0])
    bus = 4.0 * count / (took - 2 * latency)
    return {"name": "this CPU (per core)", "f32": rate / 1e12,
            "bf16": rate / 1e12, "memory": 8, "hbm": bandwidth / 1e9,
            "nvlink": bus / 1e9, "latency": latency,
            "product_efficiency": 1.0, "product_half": 0,
            "attention_efficiency": attention_rate / rate,
            "attention_half_head": 0, "attention_half_seq": 0, "cores": CORES}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    tools = {t: os.path.join(args.build, "bin", t) for t in
             ("triad-gen", "triad-opt", "triad-translate", "triad-run",
              "triad-data", "triad-plan")}
    for path in tools.values():
        if not os.access(path, os.X_OK):
            sys.exit(f"plan_vs_cpu: {path} is missing; build Triad first")
    work = tempfile.mkdtemp(prefix="triad-plan-cpu-")
    corpus = os.path.join(work, "corpus.bin")
    here = os.path.dirname(os.path.abspath(__file__))
    run([tools["triad-data"], "--output", corpus,
         os.path.join(here, "..", "README.md")])
    device = calibrate(tools, corpus, args.steps, work)
    device_file = os.path.join(work, "cpu.json")
    with open(device_file, "w") as f:
        json.dump(device, f)
    print(f"this CPU, one core: products {device['f32'] * 1e3:.1f} GFLOP/s "
          f"(attention {device['attention_efficiency'] * 100:.0f}% of that), "
          f"other instructions {device['hbm']:.1f} GB/s; MPI over shared memory "
          f"{device['nvlink']:.2f} GB/s bus bandwidth, "
          f"{device['latency'] * 1e6:.1f} us a ring step")
    print(f"{'mesh':<12} {'ranks':>5} {'measured s':>11} {'predicted s':>12} "
          f"{'error':>7}")
    failures = 0
    for name, options in MESHES:
        ranks = ranks_of(options)
        plan = compile_plan(tools, MID, options, work, "mid")
        measured = train(tools, plan, ranks, corpus, args.steps, work)
        config = " ".join([f"dp={option(options, 'dp', 1)}",
                           f"tp={option(options, 'tp', 1)}",
                           f"pp={option(options, 'pp', 1)}",
                           "microbatch=" + str(
                               8 // (int(option(options, 'dp', 1)) *
                                     int(option(options, 'microbatches', 1))))])
        predicted = json.loads(run(
            [tools["triad-plan"], *MID,
             "--device", device_file, "--gpus-per-node", str(ranks),
             "--dtype", "f32", "--memory-by", "closed-form", "--explain",
             config, "--json"]))["step"]
        error = predicted / measured - 1
        failed = abs(error) > MAX_ERROR
        failures += failed
        print(f"{name:<12} {ranks:>5} {measured:>11.3f} {predicted:>12.3f} "
              f"{error * 100:>+6.1f}%" + ("  over 25%" if failed else ""))
    subprocess.run(["rm", "-rf", work])
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
