#!/usr/bin/env python3
"""PyTorch's training throughput on the model of a Triad GPU plan: the peer
that bench/gpu/run.sh measures in the same run as triad-run.

Builds triad-gen's GPT-2 style model (bench/gpt_torch.py) with the given
sizes, trains it with AdamW and gradient clipping on random tokens, eager
or under torch.compile, in f32 (TF32 off, as triad-run's default
--matmul-precision=f32; or on, as its tf32) or with bf16 autocast, and prints one JSON line: the median step time after
warm-up, tokens/s and the model FLOPs utilization against `--peak-tflops`
(6 N + 12 L h s FLOPs per token, N the parameters without the position
table, PaLM's count).

  python3 torch_peer.py --layers 24 --hidden 1024 --heads 16 --ffn 4096 \\
      --vocab 50257 --seq 1024 --batch 8 --compile --dtype bf16

It is a benchmark, not a test: it exits non-zero only when it cannot run.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gpt_torch  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("layers", "hidden", "heads", "ffn", "vocab", "seq", "batch"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--device", default="cuda", help="cuda (default) "
                        "or cpu (to try the script where there is no GPU)")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--matmul-precision", choices=["f32", "tf32"],
                        default="f32",
                        help="f32 products exactly (default) or on TF32 "
                             "tensor cores")
    parser.add_argument("--gelu", choices=["none", "tanh"], default="tanh",
                        help="GELU approximation (default tanh: triad-gen's "
                             "GPT-2 presets)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (default: eager)")
    parser.add_argument("--attention", default="sdpa",
                        choices=sorted(gpt_torch.ATTENTIONS),
                        help="default sdpa (F.scaled_dot_product_attention)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak for --dtype (default: "
                             "H100/H200 dense: 989 bf16, 495 TF32, 67 f32; "
                             "none elsewhere)")
    args = parser.parse_args()
    if min(args.layers, args.hidden, args.heads, args.ffn, args.vocab,
           args.seq, args.batch, args.steps) < 1 or args.warmup < 0:
        parser.error("sizes and --steps must be at least 1, --warmup at "
                     "least 0")
    if args.hidden % args.heads != 0:
        parser.error("--heads must divide --hidden")
    return args


def default_peak(args):
    if args.device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    if "H100" in name or "H200" in name:
        if args.dtype == "bf16":
            return 989.0
        return 494.7 if args.matmul_precision == "tf32" else 67.0
    return None


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_peer.py: error: PyTorch sees no GPU")
    tf32 = args.matmul_precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(1234)
    config = dict(layers=args.layers, hidden=args.hidden, heads=args.heads,
                  ffn=args.ffn, vocab=args.vocab, seq=args.seq,
                  gelu=args.gelu)
    model = gpt_torch.Gpt(config, gpt_torch.ATTENTIONS[args.attention])
    model.to(args.device)
    optimizer = gpt_torch.make_optimizer(model, 3e-4, 0.1)
    step_model = torch.compile(model) if args.compile else model

    def step(tokens, labels):
        with torch.autocast(args.device, dtype=torch.bfloat16,
                            enabled=args.dtype == "bf16"):
            loss = step_model(tokens, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    generator = torch.Generator(device="cpu").manual_seed(7)
    times, loss = [], None
    for i in range(args.warmup + args.steps):
        data = torch.randint(0, args.vocab, (args.batch, args.seq + 1),
                             generator=generator)
        tokens = data[:, :-1].to(args.device)
        labels = data[:, 1:].to(args.device)
        synchronize(args.device)
        begin = time.perf_counter()
        loss = step(tokens, labels)
        synchronize(args.device)
        if i >= args.warmup:
            times.append(time.perf_counter() - begin)
    seconds = statistics.median(times)
    tokens_per_step = args.batch * args.seq
    parameters = sum(p.numel() for p in model.parameters())
    parameters -= model.embed.wpe.weight.numel()
    flops_per_token = 6 * parameters + 12 * args.layers * args.hidden * args.seq
    peak = args.peak_tflops or default_peak(args)
    achieved = flops_per_token * tokens_per_step / seconds / 1e12
    print(json.dumps({
        "peer": "pytorch " + torch.__version__,
        "device": (torch.cuda.get_device_name() if args.device == "cuda"
                   else "cpu"),
        "mode": "compile" if args.compile else "eager",
        "dtype": args.dtype,
        "matmul_precision": args.matmul_precision,
        "attention": args.attention,
        "step_seconds": seconds,
        "tokens_per_s": tokens_per_step / seconds,
        "model_tflops": achieved,
        "mfu": achieved / peak if peak else None,
        "final_loss": float(loss),
        "steps": args.steps,
    }))


if __name__ == "__main__":
    main()
