#!/usr/bin/env python3
"""Runs an mpirun command, SIGKILLs one of its ranks at a random moment, and
says how long mpirun took to end after that (for lit and FileCheck):

  kill-rank.py [--stop] BOUND_SECONDS mpirun ARGS...

With --stop the rank gets SIGSTOP instead (alive but frozen, as under a
debugger or a suspended container); the line before the kill also names
its MPI rank ("stopping MPI rank R"), so a test can check that the others
name it.

waits for the job's first "step " line (so every rank is in its step loop,
past MPI's start-up), then a random 0.2-2 s, kills a random rank (a child
process of mpirun), then prints one of

  kill-rank: mpirun exited non-zero within BOUND s of the kill
  kill-rank: mpirun exited 0 within BOUND s of the kill
  kill-rank: mpirun still running BOUND s after the kill

(killing what is left in the last case) and exits 0, leaving the verdict
to FileCheck. The delay and the rank are printed first, to reproduce a run.
"""
import os
import random
import signal
import subprocess
import sys
import threading
import time


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and "partita" in cmdline:
            found.append(int(entry))
    return sorted(found)


def mpi_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return entry.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return "?"


def main():
    args = sys.argv[1:]
    stop = args[0] == "--stop"
    if stop:
        args = args[1:]
    bound = float(args[0])
    command = args[1:]
    delay = random.uniform(0.2, 2.0)
    job = subprocess.Popen(command, start_new_session=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stepping = threading.Event()

    def echo():
        for line in job.stdout:
            text = line.decode(errors="replace")
            sys.stdout.write(text)
            sys.stdout.flush()
            if text.startswith("step "):
                stepping.set()
        stepping.set()  # the job ended before its first step

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    stepping.wait(timeout=120)
    time.sleep(delay)
    ranks = children(job.pid)
    if not ranks or job.poll() is not None:
        print(f"kill-rank: no rank to kill after {delay:.2f} s", flush=True)
        job.wait()
        reader.join()
        return
    victim = random.randrange(len(ranks))
    if stop:
        print(f"kill-rank: stopping MPI rank {mpi_rank(ranks[victim])} "
              f"(rank process {victim} of {len(ranks)}) {delay:.2f} s after "
              "the first step", flush=True)
        os.kill(ranks[victim], signal.SIGSTOP)
    else:
        print(f"kill-rank: killing rank process {victim} of {len(ranks)} "
              f"{delay:.2f} s after the first step", flush=True)
        os.kill(ranks[victim], signal.SIGKILL)
    killed = time.monotonic()
    try:
        status = job.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        print(f"kill-rank: mpirun still running {bound:g} s after the kill",
              flush=True)
        os.killpg(job.pid, signal.SIGKILL)
        if stop:
            os.kill(ranks[victim], signal.SIGKILL)
        job.wait()
        reader.join(timeout=5)
        return
    took = time.monotonic() - killed
    reader.join(timeout=5)
    if stop:
        # mpirun may leave a stopped rank behind: it is this job's.
        try:
            os.kill(ranks[victim], signal.SIGKILL)
        except OSError:
            pass
    print(f"kill-rank: mpirun ended {took:.1f} s after the kill", flush=True)
    print(f"kill-rank: mpirun exited {'0' if status == 0 else 'non-zero'} "
          f"within {bound:g} s of the kill", flush=True)


if __name__ == "__main__":
    main()
