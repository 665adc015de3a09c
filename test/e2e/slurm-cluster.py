#!/usr/bin/env python3
"""Runs a command inside a one-node Slurm cluster of this machine's own.

Starts munged (with a fresh key), slurmctld and slurmd, all under --dir
and on free local ports, waits until the node is idle, runs the command
with SLURM_CONF pointing at the cluster, then shuts everything down,
whatever the command did. Exits with the command's status.

  slurm-cluster.py --dir /tmp/slurm -- srun -n 4 --mpi=pmix triad-run ...

Needs Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh
installs them) and root, as the daemons do. Nothing outside --dir is
written; /etc/slurm and the system's munged are not touched.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo",
         "scontrol")


def missing_tools():
    return [tool for tool in TOOLS if not shutil.which(tool)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def stop(pid_files):
    for path in pid_files:
        pid = read_pid(path)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True,
                        help="folder for the cluster's configuration, state "
                        "and logs (made; must not hold a running cluster)")
    parser.add_argument("--timeout", type=float, default=30,
                        help="seconds to wait for the node (default 30)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the command to run in the cluster")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if missing := missing_tools():
        sys.exit("slurm-cluster: missing " + ", ".join(missing) +
                 " (scripts/setup.sh installs slurmctld, slurmd, "
                 "slurm-client and munge)")
    if os.geteuid() != 0:
        sys.exit("slurm-cluster: the Slurm daemons of this test run as root")

    d = os.path.abspath(args.dir)
    for sub in ("munge", "state", "spool", "log"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    os.chmod(os.path.join(d, "munge"), 0o700)
    key = os.path.join(d, "munge", "munge.key")
    if os.path.exists(key):
        os.remove(key)
    subprocess.run(["mungekey", "--create", "--keyfile", key], check=True)
    sock = os.path.join(d, "munge", "socket")
    pids = {name: os.path.join(d, name + ".pid")
            for name in ("munged", "slurmctld", "slurmd")}
    host = socket.gethostname().split(".")[0]
    config = os.path.join(d, "slurm.conf")
    with open(config, "w") as f:
        f.write(f"""ClusterName=triad
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={pids['slurmctld']}
SlurmdPidFile={pids['slurmd']}
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=triad Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=config)
    status = 1
    try:
        subprocess.run(["munged", "--force", "--socket", sock,
                        "--key-file", key,
                        "--log-file", os.path.join(d, "log", "munged.log"),
                        "--pid-file", pids["munged"],
                        "--seed-file", os.path.join(d, "munge", "seed")],
                       check=True)
        subprocess.run(["slurmctld", "-f", config], check=True, env=env)
        subprocess.run(["slurmd", "-f", config], check=True, env=env)
        deadline = time.monotonic() + args.timeout
        while True:
            state = subprocess.run(["sinfo", "--noheader", "-o", "%t"],
                                   capture_output=True, text=True, env=env)
            if state.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline:
                logs = os.path.join(d, "log")
                sys.exit(f"slurm-cluster: the node is not idle after "
                         f"{args.timeout:g} s (state "
                         f"'{state.stdout.strip() or state.stderr.strip()}'; "
                         f"logs in {logs})")
            time.sleep(0.2)
        status = subprocess.run(command, env=env).returncode
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env,
                       capture_output=True)
        stop([pids["slurmd"], pids["slurmctld"], pids["munged"]])
    return status


if __name__ == "__main__":
    sys.exit(main())
