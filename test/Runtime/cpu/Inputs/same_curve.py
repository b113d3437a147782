"""Compares the step losses of two partita train JSONL files.

  same_curve.py A.jsonl B.jsonl RTOL

The last record of each step counts; both files must hold the same steps.
Prints the worst relative difference; exits 1 above RTOL.
"""
import json
import sys

a_path, b_path, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])


def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["type"] == "step"}


a, b = losses(a_path), losses(b_path)
if sorted(a) != sorted(b):
    print("same_curve: steps differ: %s vs %s" % (sorted(a), sorted(b)))
    sys.exit(1)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
ok = worst <= rtol
print("same_curve: %d steps, max rel diff %.3e (%s, rtol %g)"
      % (len(a), worst, "ok" if ok else "FAILED", rtol))
sys.exit(0 if ok else 1)
