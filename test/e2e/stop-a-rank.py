#!/usr/bin/env python3
"""Stops one rank of an MPI job and reports how the job ends.

    stop-a-rank.py --rank R --wait-for FILE --limit SECONDS -- mpirun ...

Starts the command, waits until FILE is not empty (the job is training),
stops world rank R with SIGSTOP (found by the OMPI_COMM_WORLD_RANK or
PMIX_RANK of the processes the command started, directly or through the
launcher's daemon; other jobs' ranks are left alone), then waits up to SECONDS
for the job to end. Prints the job's exit status, whether it ended within
the limit, and the `triad-run: error:` lines of its stderr sorted by rank,
for FileCheck. A job still running at the limit is killed (exit status 1).
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command may hold spaces and parentheses: the fields after
            # its last ')' are the state, then the parent's pid.
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def descends_from(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parent_of(pid)
    return False


def ranks_of(marker, launcher):
    """World rank -> pid of the processes under `launcher` (the job's own,
    not those of other jobs running at the same time) whose command line
    holds marker."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() not in cmdline or not descends_from(
                int(entry), launcher):
            continue
        for variable in environ:
            name, _, value = variable.partition(b"=")
            if name in (b"OMPI_COMM_WORLD_RANK", b"PMIX_RANK") and value.isdigit():
                found[int(value)] = int(entry)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--wait-for", required=True)
    parser.add_argument("--limit", type=float, required=True)
    parser.add_argument("--marker", default="triad-run",
                        help="a word of the ranks' command line")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (os.path.exists(args.wait_for) and os.path.getsize(args.wait_for)):
        if job.poll() is not None or time.time() > deadline:
            print(f"the job did not start training (exit status {job.poll()})")
            print(job.communicate()[1])
            return 1
        time.sleep(0.1)
    pid = ranks_of(args.marker, job.pid).get(args.rank)
    if pid is None:
        job.kill()
        print(f"no process of rank {args.rank} found")
        return 1
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    try:
        _, err = job.communicate(timeout=args.limit)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGCONT)
        job.kill()
        _, err = job.communicate()
        print(f"still running {args.limit:g} s after rank {args.rank} stopped")
        print(err)
        return 1
    print(f"exit status {job.returncode}, "
          f"ended within {args.limit:g} s of stopping rank {args.rank}"
          f" ({time.time() - stopped:.1f} s)", file=sys.stderr)
    print(f"exit status {job.returncode}, "
          f"ended within {args.limit:g} s of stopping rank {args.rank}")
    lines = [l for l in err.splitlines() if l.startswith("triad-run: error:")]
    rank = lambda l: int(re.search(r"rank (\d+)", l).group(1)) if re.search(
        r"rank (\d+)", l) else -1
    for line in sorted(lines, key=rank):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
