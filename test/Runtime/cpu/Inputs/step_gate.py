"""Drives `partita run PLAN --steps N --step-gate IN,OUT [ARGS]` one turn at
a time and checks that it waits for each: after "step k done" nothing more
comes for 0.3 s until the harness's next line; a train step has also
printed exactly k step lines by then (its lines come as it goes). Prints
"gated N steps" and partita's output, or exits 1 saying what went wrong.

  step_gate.py PLAN N [ARGS...]
"""
import os
import select
import subprocess
import sys
import tempfile

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
    pending = b""

    def quiet(what):
        ready, _, _ = select.select([done_read], [], [], 0.3)
        if ready:
            sys.exit(f"{what}: partita went on without a turn "
                     f"('{os.read(done_read, 100).decode().strip()}')")

    def step_lines():
        out.flush()
        out.seek(0)
        return sum(1 for line in out.read().splitlines()
                   if line.startswith("step "))

    training = None
    quiet("before turn 1")
    for k in range(1, steps + 1):
        os.write(go_write, b"go\n")
        while b"\n" not in pending:
            chunk = os.read(done_read, 100)
            if not chunk:
                sys.exit(f"turn {k}: partita ended (exit {proc.wait()})")
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        if line.decode() != f"step {k} done":
            sys.exit(f"turn {k}: partita said '{line.decode()}'")
        if k < steps:
            quiet(f"after turn {k}")
        # A train step prints its line before the gate hears of it; a
        # forward run prints its lines at the end.
        if training is None:
            training = step_lines() == 1
        if training and step_lines() != k:
            sys.exit(f"after turn {k}: {step_lines()} step lines")
    os.close(go_write)
    code = proc.wait()
    if code != 0:
        sys.exit(f"partita exited with {code}")
    print(f"gated {steps} steps")
    out.seek(0)
    sys.stdout.write(out.read())
