"""Checks partita run --profile's table (stdin): the rows' ms per step add up
to the sum row, their shares to 100%, and the timed instructions take no
more than the measured step (they run inside it)."""
import re
import sys

rows, total, measured = [], None, None
for line in sys.stdin:
    # --profile-einsums adds a rate and a count of work to einsum rows.
    m = re.match(r"^  (.+?) +([0-9.]+) calls +([0-9.]+) ms +([0-9.]+)%"
                 r"(?: +[0-9.]+ GFLOP/s, [0-9.e+]+ MFLOP a call)?$", line)
    if m:
        rows.append((m.group(1), float(m.group(3)), float(m.group(4))))
        continue
    m = re.match(r"^  sum +([0-9.]+) ms \(measured step: ([0-9.]+) ms\)$", line)
    if m:
        total, measured = float(m.group(1)), float(m.group(2))
if not rows or total is None:
    sys.exit("no profile table found")
ms = sum(r[1] for r in rows)
share = sum(r[2] for r in rows)
if abs(ms - total) > 0.0015 * len(rows) + 1e-9:
    sys.exit(f"rows add up to {ms:.3f} ms, the sum row says {total:.3f} ms")
if abs(share - 100) > 0.06 * len(rows):
    sys.exit(f"shares add up to {share:.1f}%")
if total > measured * 1.001 + 0.002:
    sys.exit(f"timed instructions {total:.3f} ms exceed the step {measured:.3f} ms")
print(f"profile ok: {len(rows)} rows, {total:.3f} ms of a {measured:.3f} ms step")
