#!/usr/bin/python3
"""Training-step time of Triad's CPU runtime against PyTorch on the same model.

For each model configuration this script

  1. compiles the model with Triad's tools (triad-gen, triad-opt
     --triad-train-pipeline, triad-translate --export-plan) and trains it with
     triad-run, reading each step's `step_seconds` from the metrics file;
  2. builds the same GPT-2 style model in PyTorch (pre-LayerNorm with biases,
     learned positions, causal multi-head attention, exact-GELU MLP, final
     LayerNorm, output projection tied to the token embedding, mean cross
     entropy over next-token labels), checks that its parameters have the
     shapes and the count of Triad's, and trains it with torch.optim.AdamW
     and gradient-norm clipping on random windows of the same token file;
  3. checks that both take the same training step: PyTorch, started from
     Triad's weights and AdamW state after step 1 (a triad-run checkpoint),
     must reproduce Triad's step-2 loss, gradient norm and weight update on
     the batch triad-run sampled (--no-check skips this);
  4. prints the median step time of both after warm-up steps, and their ratio.

With --dtypes f32,bf16 it also trains the bf16 model (triad-gen --dtype
bf16: 16-bit parameters, activations and gradients, f32 master weights and
moments) against PyTorch under CPU autocast to bf16 (f32 parameters, bf16
products), and prints each side's bf16 time over its f32 time. The step
check (3) runs in f32 only.

Both sides run on the CPU with the same number of threads (OpenMP and
OpenBLAS for Triad; torch.set_num_threads plus the same environment for
PyTorch) and, by default, the same OpenBLAS build (see --torch-blas). Run it with Debian's Python, the one that can import torch:

  /usr/bin/python3 bench/train_step_vs_pytorch.py --build build --threads 2

It is a benchmark, not a test: it exits non-zero only when something fails to
run or the two models' parameters differ.
"""

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The configurations compared. `tiny` is triad-gen's preset; `mid` overrides
# its size. Every field is passed to triad-gen explicitly, so both sides build
# from this one table.
CONFIGS = {
    "tiny": dict(layers=2, hidden=64, heads=4, ffn=256, seq=64, batch=8,
                 vocab=256),
    "mid": dict(layers=6, hidden=384, heads=6, ffn=1536, seq=256, batch=8,
                vocab=256),
}
DEFAULT_STEPS = {"tiny": 20, "mid": 8}

FORTUNES = "/usr/share/games/fortunes"
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build",
                        help="Triad build folder whose bin/ has the tools "
                             "(default: ./build)")
    parser.add_argument("--threads", type=int, default=2,
                        help="Threads for both sides (default: 2)")
    parser.add_argument("--configs", default="tiny,mid",
                        help="Comma-separated configurations to run: "
                             + ", ".join(CONFIGS) + " (default: tiny,mid)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="Untimed steps before the timed ones (default: 3)")
    parser.add_argument("--steps", type=int, default=None,
                        help="Timed steps per configuration (default: "
                             + ", ".join(f"{k} {v}" for k, v in
                                         DEFAULT_STEPS.items()) + ")")
    parser.add_argument("--rounds", type=int, default=1,
                        help="Run both sides this many times (alternating) and "
                             "keep each side's best median (default: 1)")
    parser.add_argument("--corpus", default=None,
                        help="Token file (u16) to train on; default: the "
                             "fortunes under " + FORTUNES + " through "
                             "triad-data")
    parser.add_argument("--dtypes", default="f32",
                        help="Comma-separated precisions to run: f32, bf16 "
                             "(default: f32)")
    parser.add_argument("--cpu-bf16-products", default="auto",
                        choices=["auto", "onednn", "blas"],
                        help="triad-run's --cpu-bf16-products: what "
                             "multiplies the bf16 plan's bf16 operands "
                             "(oneDNN on the CPU's bf16 units, or OpenBLAS "
                             "in f32 on widened copies)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--torch-attention",
                        choices=["mha", "matmul", "fused-qkv"],
                        default="mha",
                        help="PyTorch attention: nn.MultiheadAttention (the "
                             "fastest of the three here; default), matmul + "
                             "masked softmax with separate q/k/v projections, "
                             "or the same with one fused q/k/v projection "
                             "(nanoGPT style). All three hold exactly Triad's "
                             "parameters (fused ones stack wq, wk, wv)")
    parser.add_argument("--torch-blas", choices=["match", "system", "openmp"],
                        default="match",
                        help="BLAS under torch: `match` (default) the "
                             "OpenBLAS build triad-run links (OpenMP or "
                             "pthreads), `system` the system's libblas.so.3 "
                             "(Debian's alternative), `openmp` OpenBLAS's "
                             "OpenMP build (" + OPENBLAS_OPENMP + ") through "
                             "LD_LIBRARY_PATH")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="Skip the check that both take the same step: "
                             "PyTorch starting from Triad's weights and AdamW "
                             "state after step 1 must reproduce step 2's "
                             "loss, gradient norm and weight update on "
                             "triad-run's batch")
    parser.add_argument("--keep-temp", action="store_true",
                        help="Keep the temporary folder (plans, metrics, logs)")
    args = parser.parse_args()
    for name in args.configs.split(","):
        if name not in CONFIGS:
            parser.error(f"unknown configuration '{name}' (known: "
                         f"{', '.join(CONFIGS)})")
    for dtype in args.dtypes.split(","):
        if dtype not in ("f32", "bf16"):
            parser.error(f"unknown dtype '{dtype}' (known: f32, bf16)")
    if args.threads < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1, --warmup "
                     "at least 0")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


ARGS = parse_args()


def triad_run_uses_openblas_openmp():
    try:
        out = subprocess.run(["ldd", os.path.join(ARGS.build, "bin",
                                                  "triad-run")],
                             capture_output=True, text=True).stdout
    except OSError:
        return False
    return any("openblas" in line and "=>" in line and
               OPENBLAS_OPENMP in os.path.realpath(
                   line.split("=>")[1].split()[0])
               for line in out.splitlines())


# The dynamic loader reads LD_LIBRARY_PATH when the process starts: to put
# OpenBLAS's OpenMP build under torch, start again with it set (Triad's tools
# get the original back).
if "TRIAD_BENCH_LD_LIBRARY_PATH" in os.environ:
    TORCH_BLAS = "openmp"
elif ARGS.torch_blas == "match":
    TORCH_BLAS = "openmp" if triad_run_uses_openblas_openmp() else "system"
else:
    TORCH_BLAS = ARGS.torch_blas
if TORCH_BLAS == "openmp" and "TRIAD_BENCH_LD_LIBRARY_PATH" not in \
        os.environ:
    if not os.path.exists(os.path.join(OPENBLAS_OPENMP, "libblas.so.3")):
        sys.exit(f"train_step_vs_pytorch: error: no {OPENBLAS_OPENMP}/"
                 "libblas.so.3 for --torch-blas openmp (install "
                 "libopenblas0-openmp)")
    original = os.environ.get("LD_LIBRARY_PATH", "")
    env = dict(os.environ, TRIAD_BENCH_LD_LIBRARY_PATH=original,
               LD_LIBRARY_PATH=OPENBLAS_OPENMP + (":" + original
                                                  if original else ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
# Before torch loads: its OpenMP and OpenBLAS (Debian's torch calls the system
# libblas, which is OpenBLAS here) read these at start-up.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402
from gpt_torch import ATTENTIONS, Gpt  # noqa: E402


def fail(message):
    print(f"train_step_vs_pytorch: error: {message}", file=sys.stderr)
    sys.exit(1)


def run(command, env=None, capture=True):
    result = subprocess.run(command, env=env, text=True,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None)
    if result.returncode != 0:
        fail(f"{' '.join(command)} exited with {result.returncode}:\n"
             f"{result.stdout or ''}{result.stderr or ''}")
    return result.stdout


# ----------------------------------------------------------------------------
# Machine
# ----------------------------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def torch_blas():
    """The BLAS library this process (torch) has loaded."""
    try:
        with open("/proc/self/maps") as f:
            found = sorted({line.split()[-1] for line in f
                            if "blas" in line.rsplit("/", 1)[-1]})
    except OSError:
        return "unknown"
    return ", ".join(os.path.realpath(path) for path in found) or "unknown"


def linked_blas(binary, env):
    """The BLAS library `binary` links, as ldd resolves it under `env`."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, env=env,
                             text=True).stdout
    except OSError:
        return "unknown"
    found = sorted({os.path.realpath(line.split("=>")[1].split()[0])
                    for line in out.splitlines()
                    if "blas" in line and "=>" in line})
    return ", ".join(found) or "none linked"


def triad_build_text(build):
    """Which Triad was measured: triad-run's build time and the source
    revision of the build folder (from its CMakeCache)."""
    run_tool = os.path.join(build, "bin", "triad-run")
    built = time.strftime("%Y-%m-%d %H:%M:%S",
                          time.localtime(os.path.getmtime(run_tool)))
    source = None
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    source = line.split("=", 1)[1].strip()
    except OSError:
        pass
    revision = "unknown revision"
    if source:
        head = subprocess.run(["git", "-C", source, "rev-parse", "--short",
                               "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", source, "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True)
        if head.returncode == 0:
            revision = f"{source} at {head.stdout.strip()}" + (
                " with uncommitted changes" if dirty.stdout.strip() else "")
    return f"triad-run built {built}; source {revision}"


def load_text():
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# ----------------------------------------------------------------------------
# Triad
# ----------------------------------------------------------------------------

class Triad:
    def __init__(self, build, workdir, threads):
        self.bin = os.path.join(build, "bin")
        self.workdir = workdir
        self.env = dict(os.environ, OMP_NUM_THREADS=str(threads),
                        OPENBLAS_NUM_THREADS=str(threads))
        if "TRIAD_BENCH_LD_LIBRARY_PATH" in self.env:
            original = self.env.pop("TRIAD_BENCH_LD_LIBRARY_PATH")
            if original:
                self.env["LD_LIBRARY_PATH"] = original
            else:
                self.env.pop("LD_LIBRARY_PATH", None)
        for tool in ("triad-gen", "triad-opt", "triad-translate", "triad-run",
                     "triad-data"):
            if not os.access(self.tool(tool), os.X_OK):
                fail(f"{self.tool(tool)} not found: build it with "
                     f"`ninja -C {build} {tool}` or pass --build")

    def tool(self, name):
        return os.path.join(self.bin, name)

    def corpus(self):
        files = sorted(
            os.path.join(FORTUNES, name) for name in os.listdir(FORTUNES)
            if not name.endswith((".dat", ".u8"))
            and os.path.isfile(os.path.join(FORTUNES, name)))
        if not files:
            fail(f"no text files under {FORTUNES} (install `fortunes` or "
                 "pass --corpus)")
        path = os.path.join(self.workdir, "fortunes.u16")
        run([self.tool("triad-data"), "--output", path] + files)
        return path

    def compile(self, name, config, dtype="f32"):
        name = name if dtype == "f32" else f"{name}.{dtype}"
        mlir = os.path.join(self.workdir, f"{name}.mlir")
        flags = ["--preset", "tiny", "--dtype", dtype]
        for key in ("layers", "hidden", "heads", "ffn", "seq", "batch",
                    "vocab"):
            flags += [f"--{key}", str(config[key])]
        run([self.tool("triad-gen")] + flags + ["-o", mlir])
        summary = run([self.tool("triad-gen")] + flags + ["--print-params"])
        match = re.search(r"^parameters:\s*(\d+)", summary, re.M)
        if not match:
            fail(f"no parameter count in triad-gen --print-params:\n{summary}")
        count = int(match.group(1))
        params = {}
        with open(mlir) as f:
            for m in re.finditer(r"triad\.param @([\w.]+) : tensor<([\dx]+)x"
                                 r"(?:f32|bf16)>", f.read()):
                params[m.group(1)] = tuple(int(d) for d in
                                           m.group(2).split("x"))
        rt = os.path.join(self.workdir, f"{name}.rt.mlir")
        plan = os.path.join(self.workdir, f"{name}.plan")
        # A constant learning rate, as PyTorch's side trains with
        # (decay-steps=0: the pipeline's default decays over each run, to 0
        # at its last step, which would leave step 2 of the same-step check
        # without an update).
        pipeline = (f"--triad-train-pipeline=lr={ARGS.lr} "
                    f"clip-norm={ARGS.clip_norm} "
                    f"weight-decay={ARGS.weight_decay} decay-steps=0")
        run([self.tool("triad-opt"), mlir, pipeline, "-o", rt])
        run([self.tool("triad-translate"), "--export-plan", rt, "-o", plan])
        return plan, count, params

    def train(self, name, plan, corpus, steps, round_index):
        metrics = os.path.join(self.workdir, f"{name}.{round_index}.jsonl")
        log = run([self.tool("triad-run"), plan, "--data", corpus, "--steps",
                   str(steps), "--seed", str(ARGS.seed), "--metrics", metrics,
                   "--log-every", "1", "--cpu-bf16-products",
                   ARGS.cpu_bf16_products], env=self.env)
        with open(os.path.join(self.workdir, f"{name}.{round_index}.log"),
                  "w") as f:
            f.write(log)
        records = []
        with open(metrics) as f:
            for line in f:
                if line.strip():
                    records.append(json.loads(line))
        if [r["step"] for r in records] != list(range(1, steps + 1)):
            fail(f"triad-run's metrics in {metrics} do not have steps "
                 f"1..{steps}")
        return ([r["step_seconds"] for r in records],
                [r["loss"] for r in records])

    def two_checkpointed_steps(self, name, plan, corpus):
        """Trains step 1 and saves, then resumes for step 2 and saves:
        the weights and AdamW state after step 1 and after step 2, and
        step 2's metrics (its loss is the step-1 weights' loss on step 2's
        batch)."""
        folder = os.path.join(self.workdir, f"{name}.checkpoints")
        metrics = os.path.join(self.workdir, f"{name}.check.jsonl")
        base = [self.tool("triad-run"), plan, "--data", corpus]
        run(base + ["--steps", "1", "--seed", str(ARGS.seed), "--save",
                    folder], env=self.env)
        run(base + ["--steps", "2", "--load", folder, "--save", folder,
                    "--metrics", metrics], env=self.env)
        with open(metrics) as f:
            record = json.loads(f.readline())
        return (read_checkpoint(os.path.join(folder, "step-00000001")),
                read_checkpoint(os.path.join(folder, "step-00000002")),
                record)


# ----------------------------------------------------------------------------
# Triad's data sampler and checkpoints, read from Python
# ----------------------------------------------------------------------------

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def philox4x32(counter, key):
    """Philox4x32-10, as runtime/init/Philox.cpp."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32,
                          (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return c0, c1, c2, c3


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def parameter_key(seed, name):
    """runtime/init/Init.cpp's parameterKey: FNV-1a of the name, mixed with
    the seed."""
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    z = mix64(h ^ ((seed + 0x9E3779B97F4A7C15) & MASK64))
    return z & MASK32, z >> 32


def triad_batch(tokens, seq, batch, seed, step):
    """The tokens and labels triad-run trains on at `step` (one rank, one
    microbatch): runtime/data/TokenFile.cpp's Sampler."""
    key = parameter_key(seed, "triad.data")
    starts = []
    for sample in range(batch):
        bits = philox4x32((sample & MASK32, sample >> 32, step & MASK32,
                           step >> 32), key)
        starts.append((bits[0] | bits[1] << 32) % (len(tokens) - seq))
    window = tokens[np.array(starts)[:, None] + np.arange(seq + 1)]
    window = torch.from_numpy(window)
    return window[:, :-1], window[:, 1:]


def read_checkpoint(folder):
    """Every tensor of a one-rank Triad checkpoint (safetensors), by name."""
    tensors = {}
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, file), "rb") as f:
            data = f.read()
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + length])
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if entry["dtype"] != "F32":
                fail(f"{folder}/{file}: {name} is {entry['dtype']}, "
                     "expected F32")
            begin, end = entry["data_offsets"]
            tensors[name] = np.frombuffer(
                data, dtype="<f4", count=(end - begin) // 4,
                offset=8 + length + begin).reshape(entry["shape"])
    return tensors


# ----------------------------------------------------------------------------
# PyTorch: the same model
# ----------------------------------------------------------------------------

def triad_parts(name, shape):
    """The Triad parameters (name, Triad shape) that torch parameter `name`
    of shape `shape` holds. Triad stores a linear weight as [in, out], torch
    as [out, in]; a fused q/k/v projection (`wqkv`, nn.MultiheadAttention's
    `in_proj_*`) holds Triad's wq, wk and wv stacked on dimension 0."""
    fused = re.fullmatch(r"(.*\.attn)\.(?:mha\.in_proj_|wqkv\.)(weight|bias)",
                         name)
    if fused:
        part = (shape[0] // 3,) + tuple(shape[1:])
        return [(f"{fused.group(1)}.{w}.{fused.group(2)}", part[::-1])
                for w in ("wq", "wk", "wv")]
    name = name.replace(".mha.out_proj.", ".wo.")
    if name.startswith(("embed.wte.", "embed.wpe.")):
        return [(name[:-len(".weight")], tuple(shape))]
    return [(name, tuple(shape)[::-1])]


def check_parameters(model, triad_params, triad_count):
    """Both models' parameters: the same names and shapes, and the same
    count."""
    torch_count = sum(p.numel() for p in model.parameters())
    problems, seen = [], set()
    for name, p in model.named_parameters():
        for key, shape in triad_parts(name, p.shape):
            if key not in triad_params:
                problems.append(f"{name} {tuple(p.shape)}: holds {key} "
                                f"{shape}, which is not in Triad's model")
            elif triad_params[key] != shape:
                problems.append(f"{name}: {key} has shape {shape} in torch, "
                                f"{triad_params[key]} in Triad")
            elif key in seen:
                problems.append(f"{name}: {key} twice in the torch model")
            seen.add(key)
    problems += [f"{k} {v}: not in the torch model"
                 for k, v in triad_params.items() if k not in seen]
    mlir_count = sum(math.prod(s) for s in triad_params.values())
    if not (torch_count == triad_count == mlir_count):
        problems.append(f"parameter counts differ: torch {torch_count}, "
                        f"triad-gen --print-params {triad_count}, Triad IR "
                        f"{mlir_count}")
    return torch_count, problems


def torch_layout(model, tensors, prefix=""):
    """Triad tensors named `prefix + parameter` in the layout of each of
    `model`'s parameters (transposed, fused q/k/v stacked), by torch name."""
    result = {}
    for name, p in model.named_parameters():
        pieces = []
        for key, _ in triad_parts(name, p.shape):
            array = tensors[prefix + key]
            pieces.append(array.T if array.ndim == 2
                          and not key.startswith("embed.") else array)
        result[name] = torch.from_numpy(np.array(
            np.concatenate(pieces) if len(pieces) > 1 else pieces[0],
            dtype=np.float32, order="C"))
    return result


def make_optimizer(model):
    return gpt_torch.make_optimizer(model, ARGS.lr, ARGS.weight_decay)


def train_step(model, optimizer, tokens, labels, dtype="f32"):
    if dtype == "bf16":
        # Mixed precision as PyTorch users run it on a CPU: f32 parameters
        # and optimizer, products and activations in bf16.
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(tokens, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              ARGS.clip_norm)
        optimizer.step()
        return loss.item(), norm.item()
    loss, norm = gpt_torch.train_step(model, optimizer, tokens, labels,
                                      ARGS.clip_norm)
    return loss.item(), norm.item()


def check_same_step(c, triad, name, plan, corpus):
    """Starts the PyTorch model from Triad's weights and AdamW state after
    step 1, trains step 2 on the batch triad-run trained it on, and compares
    the loss, the gradient norm and the updated weights. Returns the
    differences, and a list of problems (empty when they agree)."""
    before, after, record = triad.two_checkpointed_steps(name, plan,
                                                         corpus.path)
    model = Gpt(c, ATTENTIONS[ARGS.torch_attention])
    optimizer = make_optimizer(model)
    weights = torch_layout(model, before)
    m, v = torch_layout(model, before, "adam.m."), torch_layout(
        model, before, "adam.v.")
    completed = float(before["optimizer.step"].reshape(()))
    with torch.no_grad():
        for key, p in model.named_parameters():
            p.copy_(weights[key])
            optimizer.state[p] = {"step": torch.tensor(completed),
                                  "exp_avg": m[key].clone(),
                                  "exp_avg_sq": v[key].clone()}
    tokens, labels = triad_batch(corpus.tokens, c["seq"], c["batch"],
                                 ARGS.seed, 2)
    loss, norm = train_step(model, optimizer, tokens, labels)
    expected = torch_layout(model, after)
    # The largest difference between torch's and Triad's update of a weight,
    # in units of the learning rate (an AdamW update is about lr in size).
    # Not relative per tensor: some gradients are zero up to rounding (a key
    # bias does not change the softmax), and so are their updates.
    update_error = max(
        ((p.detach() - weights[key]) - (expected[key] - weights[key]))
        .abs().max().item() for key, p in model.named_parameters()) / ARGS.lr
    differences = dict(
        loss=(record["loss"], loss, abs(loss - record["loss"])
              / abs(record["loss"])),
        grad_norm=(record["grad_norm"], norm, abs(norm - record["grad_norm"])
                   / abs(record["grad_norm"])),
        update=update_error)
    problems = []
    if completed != 1.0:
        problems.append(f"the step-1 checkpoint has optimizer.step "
                        f"{completed}, expected 1")
    if differences["loss"][2] > 1e-4:
        problems.append("step 2's loss differs")
    if differences["grad_norm"][2] > 1e-3:
        problems.append("step 2's gradient norm differs")
    if update_error > 2e-3:
        problems.append("step 2's weight update differs")
    return differences, problems


class Corpus:
    def __init__(self, path):
        self.path = path
        self.tokens = np.fromfile(path, dtype="<u2").astype(np.int64)

    def sampler(self, batch, seq, seed):
        rng = np.random.default_rng(seed)
        span = np.arange(seq + 1)
        top = len(self.tokens) - seq - 1

        def sample():
            window = self.tokens[rng.integers(0, top + 1, batch)[:, None]
                                 + span]
            window = torch.from_numpy(window)
            return window[:, :-1], window[:, 1:]
        return sample


def torch_train(c, corpus, steps, dtype="f32"):
    torch.manual_seed(ARGS.seed)
    model = Gpt(c, ATTENTIONS[ARGS.torch_attention])
    optimizer = make_optimizer(model)
    sample = corpus.sampler(c["batch"], c["seq"], ARGS.seed)
    seconds, losses = [], []
    for _ in range(steps):
        begin = time.perf_counter()
        tokens, labels = sample()
        loss, _ = train_step(model, optimizer, tokens, labels, dtype)
        seconds.append(time.perf_counter() - begin)
        losses.append(loss)
    return model, seconds, losses


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------

def main():
    torch.set_num_threads(ARGS.threads)
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {cpu_model()}, nproc {cores} ({os.cpu_count()} online)")
    print(f"threads: {ARGS.threads} (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS; "
          f"torch.set_num_threads -> {torch.get_num_threads()})")
    print(f"torch {torch.__version__}, python {platform.python_version()}; "
          f"{ARGS.dtypes}, CPU; torch attention: {ARGS.torch_attention}, torch BLAS: "
          f"{TORCH_BLAS} (--torch-blas {ARGS.torch_blas}); Triad's bf16 "
          f"products: {ARGS.cpu_bf16_products}")
    print(f"optimizer: AdamW lr {ARGS.lr:g} betas (0.9, 0.95) eps 1e-8, weight "
          f"decay {ARGS.weight_decay:g} on matrices, clip-norm "
          f"{ARGS.clip_norm:g}; warm-up {ARGS.warmup} steps")
    print(f"load average at start: {load_text()}")

    workdir = tempfile.mkdtemp(prefix="triad-bench-")
    try:
        triad = Triad(ARGS.build, workdir, ARGS.threads)
        print(f"Triad: {triad_build_text(ARGS.build)}")
        print(f"BLAS: Triad (triad-run) "
              f"{linked_blas(triad.tool('triad-run'), triad.env)}; torch "
              f"{torch_blas()}")
        corpus_path = ARGS.corpus or triad.corpus()
        corpus = Corpus(corpus_path)
        print(f"corpus: {corpus_path} ({len(corpus.tokens):,} tokens)")
        rows = []
        for name in ARGS.configs.split(","):
            c = CONFIGS[name]
            steps = ARGS.steps or DEFAULT_STEPS[name]
            total = ARGS.warmup + steps
            plan, triad_count, triad_params = triad.compile(name, c)
            model = Gpt(c, ATTENTIONS[ARGS.torch_attention])
            torch_count, problems = check_parameters(model, triad_params,
                                                     triad_count)
            del model
            print(f"\n[{name}] layers {c['layers']} hidden {c['hidden']} heads "
                  f"{c['heads']} ffn {c['ffn']} seq {c['seq']} batch "
                  f"{c['batch']} vocab {c['vocab']}: parameters Triad "
                  f"{triad_count:,}, PyTorch {torch_count:,}"
                  + (" (equal)" if not problems else ""))
            if problems:
                fail("the PyTorch model differs from Triad's:\n  "
                     + "\n  ".join(problems))
            if ARGS.check:
                d, problems = check_same_step(c, triad, name, plan, corpus)
                print(f"  same step from Triad's step-1 state: loss Triad "
                      f"{d['loss'][0]:.6f} PyTorch {d['loss'][1]:.6f} (rel "
                      f"{d['loss'][2]:.1e}); grad norm Triad "
                      f"{d['grad_norm'][0]:.6f} PyTorch {d['grad_norm'][1]:.6f}"
                      f" (rel {d['grad_norm'][2]:.1e}); weight updates differ "
                      f"by at most {d['update']:.1e} lr")
                if problems:
                    fail("PyTorch's training step differs from Triad's: "
                         + "; ".join(problems))
            plans = {"f32": plan}
            for dtype in ARGS.dtypes.split(","):
                if dtype not in plans:
                    plans[dtype], _, _ = triad.compile(name, c, dtype)
                best_triad = best_torch = None
                for r in range(ARGS.rounds):
                    load_before = load_text()
                    t_sec, t_loss = triad.train(f"{name}.{dtype}",
                                                plans[dtype], corpus_path,
                                                total, r)
                    _, p_sec, p_loss = torch_train(c, corpus, total, dtype)
                    t_med = statistics.median(t_sec[ARGS.warmup:])
                    p_med = statistics.median(p_sec[ARGS.warmup:])
                    print(f"  {dtype} round {r + 1}: Triad median "
                          f"{t_med * 1e3:.1f} ms (min "
                          f"{min(t_sec[ARGS.warmup:]) * 1e3:.1f}, max "
                          f"{max(t_sec[ARGS.warmup:]) * 1e3:.1f}), PyTorch "
                          f"median {p_med * 1e3:.1f} ms (min "
                          f"{min(p_sec[ARGS.warmup:]) * 1e3:.1f}, max "
                          f"{max(p_sec[ARGS.warmup:]) * 1e3:.1f}); loss step "
                          f"1 -> {total}: Triad {t_loss[0]:.4f} -> "
                          f"{t_loss[-1]:.4f}, PyTorch {p_loss[0]:.4f} -> "
                          f"{p_loss[-1]:.4f}; load {load_before} -> "
                          f"{load_text()}")
                    best_triad = (t_med if best_triad is None
                                  else min(best_triad, t_med))
                    best_torch = (p_med if best_torch is None
                                  else min(best_torch, p_med))
                rows.append((name, dtype, triad_count, steps, best_triad,
                             best_torch))

        print(f"\nthreads {ARGS.threads}, nproc {cores}, {cpu_model()}; "
              f"median of the timed steps after {ARGS.warmup} warm-up"
              + (f", best of {ARGS.rounds} rounds" if ARGS.rounds > 1 else ""))
        header = (f"{'config':<8} {'dtype':<5} {'parameters':>12} "
                  f"{'steps':>5} {'Triad ms/step':>14} "
                  f"{'PyTorch ms/step':>16} {'Triad/PyTorch':>14}")
        print(header)
        print("-" * len(header))
        for name, dtype, count, steps, t, p in rows:
            print(f"{name:<8} {dtype:<5} {count:>12,} {steps:>5} "
                  f"{t * 1e3:>14.1f} {p * 1e3:>16.1f} {t / p:>14.2f}")
        # Each side's 16-bit step against its own f32 step.
        times = {(name, dtype): (t, p) for name, dtype, _, _, t, p in rows}
        for name, dtype, _, _, t, p in rows:
            if dtype != "f32" and (name, "f32") in times:
                t32, p32 = times[(name, "f32")]
                print(f"{name} {dtype} over f32: Triad {t / t32:.2f}, "
                      f"PyTorch {p / p32:.2f}")
        print(f"load average at end: {load_text()}")
    finally:
        if ARGS.keep_temp:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
