"""Compares `partita explain`'s predicted memory total per device with the
high-water mark `partita run --report-memory` measured on rank 0.

Usage: compare_memory.py EXPLAIN_OUTPUT RUN_OUTPUT RTOL [--arena-below-outputs]

Prints one line with both numbers and exits non-zero when they differ by
more than RTOL (relative to the prediction). --arena-below-outputs also
requires the arena peak to be smaller than the program's results (the
updated parameters and optimizer state): true only when the updates are
donated, since results that live in the arena are all live at once when the
step ends.
"""

import re
import sys


def field(text, pattern, what):
    match = re.search(pattern, text, re.MULTILINE)
    if not match:
        sys.exit(f"compare_memory: no {what} in the output")
    return int(match.group(1))


def main():
    explain = open(sys.argv[1]).read()
    run = open(sys.argv[2]).read()
    rtol = float(sys.argv[3])
    total = field(explain, r"^  total +(\d+) B", "explain total")
    measured = field(run, r"high-water mark (\d+) B", "measured high-water mark")
    diff = abs(measured - total) / total
    ok = diff <= rtol
    print(f"memory: explain total {total} B, measured {measured} B, "
          f"relative difference {diff:.4f} ({'ok' if ok else 'FAILED'}, "
          f"rtol {rtol})")
    if "--arena-below-outputs" in sys.argv[4:]:
        arena = field(explain, r"^  arena peak +(\d+) B", "arena peak")
        outputs = field(explain, r"^  outputs +(\d+) B", "outputs")
        below = arena < outputs
        print(f"arena: peak {arena} B, outputs {outputs} B "
              f"({'ok' if below else 'FAILED'}: the arena holds no update)")
        ok = ok and below
    sys.exit(0 if ok else 1)


main()
