"""trace_spans.py TRACE: per rank, the steps and the spans per step
by kind (F, B, W, send, recv, update, step) of a --trace file; and whether each
rank's spans follow one another in time."""
import collections
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
spans = collections.defaultdict(list)
for e in events:
    if e["ph"] == "X":
        spans[e["tid"]].append(e)
ordered = True
for tid in sorted(spans):
    kinds = collections.Counter()
    steps = set()
    last_end = -1.0
    for e in spans[tid]:
        steps.add(e["args"]["step"])
        name = e["name"]
        kind = name.split(" ")[0] if " " in name else (name if name in ("update", "step") else name[0])
        kinds[kind] += 1
        if e["ts"] + 2e-3 < last_end:
            ordered = False
        last_end = e["ts"] + e["dur"]
    n = len(steps)
    per = " ".join(f"{k} {kinds[k] // n}" for k in ("F", "B", "W", "send", "recv", "update", "step") if kinds[k])
    print(f"rank {tid}: steps {n}, per step {per}")
print("spans nest in time: " + ("ok" if ordered else "OVERLAP"))
