"""Kills a `partita train` run and restarts it; checks the losses.

  train_kill_resume.py PARTITA CONFIG WORKDIR SIGNAL [flags...]

PARTITA is the partita command, or a launcher line with it ("mpirun -np 2
partita", one string); the signal then goes to the launcher (mpirun passes
SIGTERM on to every rank).

Runs CONFIG once uninterrupted (WORKDIR/full), then again (WORKDIR/killed)
sending SIGNAL (KILL or TERM) once the metrics file shows a step drawn at
random from the middle of the run, and then reruns the same command, which
must resume from the newest complete checkpoint by itself. Every step's and
every evaluation's loss of the interrupted run (the last record of each
step in its metrics file) must equal the uninterrupted run's bit for bit.
With TERM the interrupted process must exit 0 after saving. Prints one
summary line; exits 1 on a mismatch.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

launcher, config, workdir, signame = sys.argv[1:5]
extra = sys.argv[5:]
# PARTITA may be a launcher line ("mpirun -np 2 partita"): split on spaces.
partita = launcher.split()


def command(name):
    d = os.path.join(workdir, name)
    return partita + ["train", config, "--checkpoint.dir", d + "/ck",
            "--log.metrics", d + "/metrics.jsonl"] + extra, d + "/metrics.jsonl"


def records(path):
    by_step, evals = {}, {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            (by_step if r["type"] == "step" else evals)[r["step"]] = r
    return by_step, evals


def descendants(pid):
    """The processes below `pid` (from /proc), deepest last."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def last_step(path):
    try:
        with open(path) as f:
            lines = [l for l in f if l.endswith("\n") and '"type":"step"' in l]
        return json.loads(lines[-1])["step"] if lines else 0
    except FileNotFoundError:
        return 0


full, full_metrics = command("full")
subprocess.run(full, check=True, stdout=subprocess.DEVNULL)
steps, evals = records(full_metrics)
total = max(steps)

killed, killed_metrics = command("killed")
target = random.randint(total // 4, total // 2)
proc = subprocess.Popen(killed, stdout=subprocess.PIPE, text=True)
while last_step(killed_metrics) < target and proc.poll() is None:
    time.sleep(0.002)
if proc.poll() is not None:
    print("kill-resume: the run ended before step %d" % target)
    sys.exit(1)
sig = signal.SIGKILL if signame == "KILL" else signal.SIGTERM
if len(partita) > 1:
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
else:
    proc.send_signal(sig)
out, _ = proc.communicate()
at = last_step(killed_metrics)
if signame == "TERM":
    if proc.returncode != 0 or "stopped by a signal after step" not in out:
        print("kill-resume: SIGTERM: exit %d, output:\n%s" % (proc.returncode, out))
        sys.exit(1)
    print(out.strip().splitlines()[-1])
elif len(partita) == 1 and proc.returncode != -signal.SIGKILL:
    print("kill-resume: SIGKILL: exit %d" % proc.returncode)
    sys.exit(1)
rerun = subprocess.run(killed, check=True, stdout=subprocess.PIPE, text=True)
resumed = [l for l in rerun.stdout.splitlines() if "resuming from" in l]
print(resumed[0] if resumed else "kill-resume: the rerun did not resume")
got_steps, got_evals = records(killed_metrics)
bad = [s for s in steps if got_steps.get(s, {}).get("loss") != steps[s]["loss"]]
bad += ["eval %d" % s for s in evals
        if got_evals.get(s, {}).get("val_loss") != evals[s]["val_loss"]]
if bad or not resumed:
    print("kill-resume: FAILED: losses differ at", bad)
    sys.exit(1)
print("kill-resume: SIG%s after step %d; all %d steps and %d evaluations "
      "equal the uninterrupted run's bit for bit" % (signame, at, total, len(evals)))
