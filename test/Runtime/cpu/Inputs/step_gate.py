"""Drives `partita run PLAN --steps N --step-gate IN,OUT [ARGS]` one step at
a time and checks that it waits for each turn: before the harness's k-th
line, partita has printed exactly k - 1 step lines, even 0.3 s later; after
it, partita reports "step k done" and has printed k. Prints "gated N steps"
and partita's output, or exits 1 saying what went wrong.

  step_gate.py PLAN N [ARGS...]
"""
import os
import subprocess
import sys
import tempfile
import time

plan, steps, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
go_read, go_write = os.pipe()
done_read, done_write = os.pipe()
with tempfile.TemporaryFile("w+") as out:
    proc = subprocess.Popen(
        ["partita", "run", plan, "--steps", str(steps), "--step-gate",
         f"{go_read},{done_write}"] + extra,
        stdout=out, pass_fds=(go_read, done_write))
    os.close(go_read)
    os.close(done_write)
    done = os.fdopen(done_read)

    def step_lines():
        out.flush()
        out.seek(0)
        return sum(1 for line in out.read().splitlines()
                   if line.startswith("step "))

    for k in range(1, steps + 1):
        time.sleep(0.3)
        if step_lines() != k - 1:
            sys.exit(f"before turn {k}: {step_lines()} step lines, "
                     f"expected {k - 1} (partita did not wait)")
        os.write(go_write, b"go\n")
        line = done.readline().strip()
        if line != f"step {k} done":
            sys.exit(f"turn {k}: partita said '{line}'")
        # The step line is printed before the gate hears of it.
        if step_lines() != k:
            sys.exit(f"after turn {k}: {step_lines()} step lines")
    os.close(go_write)
    code = proc.wait()
    if code != 0:
        sys.exit(f"partita exited with {code}")
    print(f"gated {steps} steps")
    out.seek(0)
    sys.stdout.write(out.read())
