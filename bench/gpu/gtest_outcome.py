#!/usr/bin/env python3
"""The outcome of one GoogleTest binary's run in the GPU bundle, from its
text output: one line on stdout, and the exit status

  0  passed: every test ran and passed (where there is a GPU, the tests that
     check the no-GPU error, CudaExecutorWithoutGpu.*, may skip saying "this
     machine has a GPU");
  3  no GPU: nothing failed, and the only skips are the tests that need a GPU,
     saying "no CUDA device on this machine", on a machine without one;
  1  failed: a test failed, the binary did not finish, a test skipped for
     another reason, or tests found no GPU where the machine has one.

  gtest_outcome.py OUTPUT.txt --gpu yes|no
"""

import argparse
import re
import sys

NO_GPU = "no CUDA device on this machine"
HAS_GPU = "this machine has a GPU"
ALLOWED_ON_GPU = "CudaExecutorWithoutGpu."


def parse(lines):
    """(finished, passed, failed, skipped: {test: message})."""
    finished = False
    passed, failed, skipped = set(), set(), {}
    current, message = None, []
    for line in lines:
        line = line.rstrip("\n")
        if re.match(r"^\[=+\] \d+ tests? from \d+ test suites? ran", line):
            finished = True
        match = re.match(r"^\[ RUN      \] (\S+)", line)
        if match:
            current, message = match.group(1), []
            continue
        match = re.match(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+) \(", line)
        if match:
            result, test = match.groups()
            if result == "OK":
                passed.add(test)
            elif result == "FAILED":
                failed.add(test)
            else:
                skipped[test] = "\n".join(message)
            current = None
            continue
        if current:
            message.append(line)
    return finished, passed, failed, skipped


def outcome(lines, gpu):
    finished, passed, failed, skipped = parse(lines)
    if failed:
        return 1, f"FAILED: {', '.join(sorted(failed))}"
    if not finished:
        return 1, "FAILED: the binary did not finish (crashed or timed out)"
    for_want_of_gpu = {t for t, m in skipped.items() if NO_GPU in m}
    allowed = {t for t, m in skipped.items()
               if gpu and t.startswith(ALLOWED_ON_GPU) and HAS_GPU in m}
    other = set(skipped) - for_want_of_gpu - allowed
    if other:
        return 1, f"FAILED: skipped for another reason: {', '.join(sorted(other))}"
    if for_want_of_gpu and gpu:
        return 1, (f"FAILED: {len(for_want_of_gpu)} tests found no GPU, "
                   "though nvidia-smi lists one")
    if for_want_of_gpu:
        return 3, (f"no GPU: {len(passed)} passed, {len(for_want_of_gpu)} "
                   "skipped for want of a GPU")
    note = f" ({len(allowed)} no-GPU check skipped)" if allowed else ""
    return 0, f"passed: {len(passed)} tests{note}"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="the binary's text output")
    parser.add_argument("--gpu", choices=["yes", "no"], required=True,
                        help="whether the machine has a GPU (nvidia-smi)")
    args = parser.parse_args()
    try:
        with open(args.output, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as error:
        print(f"FAILED: cannot read {args.output}: {error.strerror}")
        return 1
    code, line = outcome(lines, args.gpu == "yes")
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
