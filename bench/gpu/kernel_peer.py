#!/usr/bin/env python3
"""PyTorch's memory-bound operations on the shapes of kernel_bench (Triad's
element-wise, norm, reduction and loss kernels), timed with CUDA events
(median after warm-up), one JSON line each with the same kernel names and
byte counts: the peer of kernel_bench in bench/gpu/run.sh. A benchmark, not
a test."""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from cuda_timing import median_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("rows", 8192), ("hidden", 2048), ("ffn", 8192),
                          ("vocab", 50257), ("warmup", 3), ("repeats", 20)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--dtype", choices=["bf16", "f16", "f32"],
                        default="bf16")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("kernel_peer.py: error: PyTorch sees no GPU")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16,
             "f32": torch.float32}[args.dtype]
    rows, hidden, ffn, vocab = args.rows, args.hidden, args.ffn, args.vocab

    def tensor(*shape, dt=dtype, scale=1.0):
        return torch.randn(shape, device="cuda", dtype=dt) * scale

    x, y, z = (tensor(rows, hidden) for _ in range(3))
    bias, gamma, beta = (tensor(hidden) for _ in range(3))
    mlp, dmlp = tensor(rows, ffn), tensor(rows, ffn)
    master = tensor(hidden, ffn, dt=torch.float32)
    weight = tensor(hidden, ffn)
    grad = tensor(hidden, ffn)
    accumulator = tensor(hidden, ffn, dt=torch.float32)
    logits = tensor(rows, vocab, scale=0.1).requires_grad_(True)
    labels = (torch.arange(rows, device="cuda") * 7919) % vocab
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [hidden], gamma, beta,
                                                     1e-5)
    size = x.element_size()

    def shape(a, b):
        return f"{a}x{b}"

    def cross_entropy():
        loss = F.cross_entropy(logits, labels)
        torch.autograd.grad(loss, logits)

    cases = [
        ("add", shape(rows, hidden), 3 * x.numel() * size,
         lambda: torch.add(x, y, out=z)),
        ("add-bias", shape(rows, hidden), 2 * x.numel() * size,
         lambda: torch.add(x, bias, out=z)),
        ("gelu-tanh-grad", shape(rows, ffn), 3 * mlp.numel() * size,
         lambda: torch.ops.aten.gelu_backward(dmlp, mlp, approximate="tanh")),
        ("cast-f32", shape(hidden, ffn), master.numel() * (4 + size),
         lambda: weight.copy_(master)),
        ("fill-f32", shape(hidden, ffn), accumulator.numel() * 4,
         lambda: accumulator.zero_()),
        ("accumulate-f32", shape(hidden, ffn), grad.numel() * (8 + size),
         lambda: accumulator.add_(grad)),
        ("layer-norm", shape(rows, hidden), 2 * x.numel() * size,
         lambda: torch.ops.aten.native_layer_norm(x, [hidden], gamma, beta,
                                                  1e-5)),
        ("layer-norm-grad", shape(rows, hidden), 3 * x.numel() * size,
         lambda: torch.ops.aten.native_layer_norm_backward(
             y, x, [hidden], mean, rstd, gamma, beta, [True, True, False])),
        ("bias-grad", shape(rows, ffn), mlp.numel() * size,
         lambda: mlp.sum(0)),
        ("cross-entropy-fwd-bwd", shape(rows, vocab),
         3 * logits.numel() * size, cross_entropy),
    ]

    for name, shape_text, nbytes, run in cases:
        print(json.dumps({"impl": "pytorch " + torch.__version__,
                          "kernel": name, "dtype": args.dtype,
                          "shape": shape_text, "bytes": nbytes,
                          "ms": median_ms(run, args.warmup, args.repeats)}), flush=True)


if __name__ == "__main__":
    main()
