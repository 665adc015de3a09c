#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (causal) forward and forward +
backward on one shape, timed with CUDA events (median after warm-up), as
one JSON line: the peer of attention_bench (Triad's CUDA attention) in
bench/gpu/run.sh. f32 with TF32 off, as Triad's kernel computes; --dtype
bf16 for reference. A benchmark, not a test."""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from cuda_timing import median_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("batch", 4), ("heads", 16), ("seq", 2048),
                          ("head-dim", 64), ("warmup", 3), ("repeats", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention_peer.py: error: PyTorch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=dtype)
                     for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def both():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), dout)

    print(json.dumps({"impl": "pytorch " + torch.__version__,
                      "dtype": args.dtype, "batch": args.batch,
                      "heads": args.heads, "seq": args.seq,
                      "head_dim": args.head_dim,
                      "forward_ms": median_ms(forward, args.warmup, args.repeats),
                      "forward_backward_ms": median_ms(both, args.warmup, args.repeats)}))


if __name__ == "__main__":
    main()
