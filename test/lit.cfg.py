# -*- Python -*-
# lit configuration of Triad's regression tests (.mlir, .test).

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "Triad"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.triad_obj_root, "test")
config.excludes = ["Unit", "Inputs", "CMakeLists.txt", "lit.cfg.py",
                   "lit.site.cfg.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%triad_src_root", config.triad_src_root))
config.substitutions.append(("%triad_obj_root", config.triad_obj_root))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.triad_tools_dir, config.llvm_tools_dir]
tools = ["triad-opt", "triad-gen", "triad-interp", "triad-data", "triad-translate",
         "triad-convert", "triad-run", "triad-sample", "triad-plan"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# Multi-rank tests need Open MPI's launcher. It refuses root unless told, and
# a 2-core machine needs oversubscription; one BLAS/OpenMP thread per rank.
import shutil
if shutil.which("mpirun"):
    config.available_features.add("mpi")
    for name, value in [("OMPI_ALLOW_RUN_AS_ROOT", "1"),
                        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
                        ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
                        ("OMP_NUM_THREADS", "1"),
                        ("OPENBLAS_NUM_THREADS", "1")]:
        config.environment[name] = value

import subprocess

# A one-node Slurm for the srun test (test/e2e/slurm-cluster.py): Debian's
# slurmctld, slurmd, slurm-client and munge (scripts/setup.sh installs them);
# the daemons run as root.
if all(shutil.which(tool) for tool in ("munged", "mungekey", "slurmctld",
                                       "slurmd", "srun", "sinfo",
                                       "scontrol")) and os.geteuid() == 0:
    config.available_features.add("slurm")


# The Python test helpers from PyPI, in the virtual environment
# scripts/setup.sh makes (.venv, or TRIAD_VENV): %venv_python runs it.
venv_python = os.path.join(
    os.environ.get("TRIAD_VENV", os.path.join(config.triad_src_root, ".venv")),
    "bin", "python")
config.substitutions.append(("%venv_python", venv_python))
for module in ("tensorboard", "tokenizers"):
    if os.path.exists(venv_python) and subprocess.run(
            [venv_python, "-c", "import " + module],
            capture_output=True).returncode == 0:
        config.available_features.add(module)

# Debian's matplotlib (python3-matplotlib), for scripts/plot-metrics.py.
if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                  capture_output=True).returncode == 0:
    config.available_features.add("matplotlib")

# Hugging Face's transformers, in the environment scripts/setup.sh makes
# for it (.venv-transformers, or TRIAD_TRANSFORMERS_VENV): %hf_python.
hf_python = os.path.join(
    os.environ.get("TRIAD_TRANSFORMERS_VENV",
                   os.path.join(config.triad_src_root, ".venv-transformers")),
    "bin", "python")
config.substitutions.append(("%hf_python", hf_python))
if os.path.exists(hf_python) and subprocess.run(
        [hf_python, "-c", "import transformers, torch"],
        capture_output=True).returncode == 0:
    config.available_features.add("transformers")

# Debian's PyTorch (python3-torch): the independent reference of
# triad-convert's tests.
if subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                  capture_output=True).returncode == 0:
    config.available_features.add("torch")

# SentencePiece: triad-data built with it, and Debian's Python module to
# train models and check the ids.
if subprocess.run(["/usr/bin/python3", "-c", "import sentencepiece"],
                  capture_output=True).returncode == 0:
    config.available_features.add("sentencepiece")

# The demo's corpus: the fortune texts scripts/setup.sh installs.
if os.path.isdir("/usr/share/games/fortunes"):
    config.available_features.add("fortunes")

# GPU tests (REQUIRES: cuda) run where the CUDA backend was built and
# nvidia-smi lists a GPU, those between GPUs (cuda-gpus-2, cuda-gpus-4)
# where it lists that many; elsewhere lit reports them unsupported. TRIAD_LIT_CUDA=0 or
# 1 overrides the detection (one GPU).

def triad_gpu_count():
    """The GPUs nvidia-smi lists (0 without the CUDA backend or a GPU)."""
    if not getattr(config, "triad_cuda_built", False):
        return 0
    forced = os.environ.get("TRIAD_LIT_CUDA")
    if forced in ("0", "1"):
        return int(forced)
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    if listed.returncode != 0:
        return 0
    return sum(1 for line in listed.stdout.splitlines()
               if line.startswith("GPU "))


def triad_has_gpu():
    return triad_gpu_count() > 0


# oneDNN's bf16 products run where the build has oneDNN and the CPU has
# bf16 instructions (runtime/kernels/cpu/Bf16Products.h): AVX512-BF16, which
# every CPU with AMX also has.
def triad_has_bf16_products():
    if not getattr(config, "triad_have_onednn", False):
        return False
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(line.startswith("flags") and
                       " avx512_bf16" in line for line in cpuinfo)
    except OSError:
        return False


if triad_has_bf16_products():
    config.available_features.add("onednn-bf16")
if getattr(config, "triad_cuda_built", False):
    config.available_features.add("cuda-built")
if triad_has_gpu():
    config.available_features.add("cuda")
# Tests of NCCL between GPUs (REQUIRES: cuda-gpus-2, cuda-gpus-4) need a
# GPU per rank.
for gpus in (2, 4):
    if triad_gpu_count() >= gpus:
        config.available_features.add(f"cuda-gpus-{gpus}")
config.substitutions.append(
    ("%triad_unit_dir", os.path.join(config.triad_obj_root, "test", "Unit")))
