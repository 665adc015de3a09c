#!/usr/bin/env python3
"""Holds triad-plan to Narayanan et al. 2021 (arXiv 2104.04473), Table 1.

Ten GPT models from 1.7 B to 1 T parameters trained with Megatron-LM on
DGX A100 80 GB nodes (8 GPUs with NVSwitch, 8 x 200 Gb/s InfiniBand per
node), sequence 2048, vocabulary 51,200, full recomputation, with the
published tensor- and pipeline-parallel sizes, GPU count, global batch and
achieved TFLOP/s per GPU. For each row:

  - triad-plan --explain of the published configuration (microbatch 1; the
    implementation megatron-2021: attention scores and dropout masks kept;
    16-bit gradients) predicts the published TFLOP/s within 10%;
  - the published configuration fits in memory;
  - the search's best configuration is predicted at least as fast (its
    step no longer) and fits.

Usage: narayanan.py TRIAD_PLAN
"""

import json
import subprocess
import sys

# parameters (B), heads, hidden, layers, tp, pp, GPUs, batch, TFLOP/s per GPU
TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def plan(tool, row, *extra):
    billions, heads, hidden, layers, tp, pp, gpus, batch, _ = row
    command = [tool, "--layers", str(layers), "--hidden", str(hidden),
               "--heads", str(heads), "--seq", "2048", "--vocab", "51200",
               "--gpu", "a100-80gb", "--nodes", str(gpus // 8),
               "--batch", str(batch), "--implementation", "megatron-2021",
               "--grad-accumulation", "param", "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {done.stderr}")
    return json.loads(done.stdout)


def main():
    tool = sys.argv[1]
    failures = 0
    for row in TABLE_1:
        billions, heads, hidden, layers, tp, pp, gpus, batch, published = row
        dp = gpus // (tp * pp)
        mine = plan(tool, row, "--explain",
                    f"dp={dp} tp={tp} pp={pp} microbatch=1 recompute=full")
        best = plan(tool, row, "--top", "1")["best"]
        error = mine["tflops"] / published - 1 if mine["fits"] else None
        ok = (mine["fits"] and abs(error) <= 0.10 and best and
              best[0]["fits"] and best[0]["step"] <= mine["step"] * (1 + 1e-9))
        failures += not ok
        print(f"{billions:7.1f} B on {gpus:>4} GPUs (tp {tp}, pp {pp}): "
              f"published {published} TFLOP/s, predicted "
              f"{mine.get('tflops', 0):.1f} ({100 * (error or 0):+.1f}%), "
              f"{mine['memory'] / 2**30:.1f} GiB; best "
              f"'{best[0]['options'] if best else 'none'}' "
              f"{best[0]['step'] if best else 0:.2f} s against "
              f"{mine.get('step', 0):.2f} s" + ("" if ok else "  FAILED"))
    print("all within 10%" if not failures else f"{failures} rows FAILED")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
