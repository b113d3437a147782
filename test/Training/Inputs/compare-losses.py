#!/usr/bin/env python3
# Compares the per-step losses of two `partita run --steps N` logs: every
# step's loss in B within RTOL (relative) of A's. Prints the largest
# relative difference and exits non-zero past the tolerance or when the
# logs differ in their steps.
import re
import sys


def losses(path):
    found = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"step (\d+)/\d+\s+loss (\S+)", line)
            if m:
                found[int(m.group(1))] = float(m.group(2))
    return found


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: compare-losses.py A.log B.log RTOL")
    a, b, rtol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
    if not a or sorted(a) != sorted(b):
        sys.exit(f"the logs have different steps: {sorted(a)} vs {sorted(b)}")
    worst, at = max((abs(b[s] - a[s]) / abs(a[s]), s) for s in a)
    print(f"{len(a)} steps, largest relative loss difference {worst:.3e} "
          f"at step {at} ({'ok' if worst <= rtol else 'FAILED'}, rtol {rtol:g})")
    sys.exit(0 if worst <= rtol else 1)


main()
