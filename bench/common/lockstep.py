"""Runs programs in lockstep: one training step at a time, in turns, so that
every program sees the same machine (a slow phase of a shared host, another
tenant's load) step for step instead of round for round.

  python3 lockstep.py STEPS OUT1 CMD1 [OUT2 CMD2 ...]

Each CMD is a shell command that takes STEPS steps (warm-up included) and
names its gate as "{gate}": `partita run --step-gate {gate}` and
torch_ddp.py's --step-gate. The gate is "IN,OUT", two file descriptors of
pipes to this harness: before each step the program reads one line ("go")
from IN; after it, it writes one line to OUT. A turn is one step of each
program (--steps-per-turn K: K steps in a row); turn t starts with program
t mod N, each program then going in order, so no program always follows
the same one. Between its turns a program is stopped (SIGSTOP to its
process group; --no-park leaves it running): OpenBLAS and OpenMP threads
spin for a while after their work, and would take a core from the
program whose turn it is. A program's stdout goes to its OUT file (stderr
stays on ours).

Exits 1, naming the program, when one exits before its STEPS turns, sends
no line within --turn-timeout seconds (default 1800), or exits non-zero.
"""
import argparse
import os
import select
import signal
import subprocess
import sys
import time


class Program:
    def __init__(self, index, out_path, command):
        self.index, self.command = index, command
        go_read, self.go = os.pipe()
        self.done, done_write = os.pipe()
        self.out = open(out_path, "w")
        shell = command.replace("{gate}", f"{go_read},{done_write}")
        # Its own process group, so that it can be parked whole.
        self.proc = subprocess.Popen(shell, shell=True, stdout=self.out,
                                     pass_fds=(go_read, done_write),
                                     start_new_session=True)
        os.close(go_read)
        os.close(done_write)
        self.pending = b""

    def name(self):
        return f"program {self.index + 1} ({self.command.split()[0]} ...)"

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def turn(self, step, timeout, park):
        """Lets the program take one step; returns its line. With `park`
        the program is stopped (SIGSTOP to its process group) once it has
        said it is done, and continued before its next turn: a BLAS or
        OpenMP thread that spins after its work would otherwise take a
        core from the program whose turn it is."""
        if park:
            self.signal(signal.SIGCONT)
        try:
            os.write(self.go, b"go\n")
        except BrokenPipeError:
            fail(f"{self.name()} closed its gate before step {step + 1}")
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"{self.name()} sent nothing within {timeout:g} s of "
                     f"its turn at step {step + 1}")
            ready, _, _ = select.select([self.done], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.done, 4096)
            if not chunk:
                code = self.proc.wait()
                fail(f"{self.name()} ended (exit {code}) during its turn at "
                     f"step {step + 1}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        if park:
            self.signal(signal.SIGSTOP)
        return line.decode()

    def finish(self):
        self.signal(signal.SIGCONT)
        os.close(self.go)
        code = self.proc.wait()
        os.close(self.done)
        self.out.close()
        if code != 0:
            fail(f"{self.name()} exited with {code}")


class Gate:
    """A peer program's side of the gate: `--step-gate IN,OUT` as parsed by
    parse(), or the paths of the two descriptors (e.g. /proc/PID/fd/N, for
    processes that do not inherit them)."""

    @staticmethod
    def parse(text):
        """The two descriptors of "IN,OUT", or None when malformed."""
        fds = text.split(",")
        if len(fds) != 2 or not all(f.isdigit() for f in fds):
            return None
        return [int(f) for f in fds]

    @staticmethod
    def from_option(parser, text):
        """The Gate of a --step-gate IN,OUT value (None for none); a
        malformed value is the parser's error."""
        if not text:
            return None
        fds = Gate.parse(text)
        if fds is None:
            parser.error(f"--step-gate expects IN,OUT (two file descriptors), "
                         f"got '{text}'")
        return Gate(fds)

    def __init__(self, ends):
        self.read = open(ends[0], "rb", buffering=0)
        self.write = open(ends[1], "wb", buffering=0)
        self.steps = 0

    def turn(self):
        """Waits for the harness's go before a step."""
        if not self.read.readline():
            sys.exit(f"--step-gate: the harness stopped giving turns before "
                     f"step {self.steps + 1}")

    def done(self):
        self.steps += 1
        self.write.write(f"step {self.steps} done\n".encode())


programs = []


def fail(message):
    print(f"lockstep: error: {message}", file=sys.stderr)
    for p in programs:
        if p.proc.poll() is None:
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGKILL)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", type=int)
    parser.add_argument("pairs", nargs="+", metavar="OUT CMD")
    parser.add_argument("--turn-timeout", type=float, default=1800)
    parser.add_argument("--no-park", action="store_true",
                        help="leave a program running between its turns "
                        "(default: stopped, SIGSTOP, so that no thread of it "
                        "spins on a core during another's turn)")
    parser.add_argument("--steps-per-turn", type=int, default=1,
                        help="steps a program takes in a row in its turn "
                        "(default 1); STEPS must be a multiple")
    a = parser.parse_args()
    if a.steps < 1 or len(a.pairs) % 2:
        parser.error("expects STEPS (at least 1), then OUT CMD pairs")
    k = a.steps_per_turn
    if k < 1 or a.steps % k:
        parser.error(f"--steps-per-turn {k} does not divide STEPS {a.steps}")
    for i in range(0, len(a.pairs), 2):
        if "{gate}" not in a.pairs[i + 1]:
            parser.error(f"command {i // 2 + 1} does not name its {{gate}}")
        programs.append(Program(i // 2, a.pairs[i], a.pairs[i + 1]))
    n = len(programs)
    for turn in range(a.steps // k):
        for j in range(n):
            for step in range(turn * k, turn * k + k):
                programs[(turn + j) % n].turn(step, a.turn_timeout,
                                              not a.no_park)
    for p in programs:
        p.finish()


if __name__ == "__main__":
    main()
