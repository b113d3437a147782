"""stage_activations.py LIMIT_NAME EXPLAIN... -- CANDIDATE EXPLAIN...: the
activation memory of each stage (`partita explain --stage S` output: its
"pipeline" slots plus its "stage arena") of a reference schedule and of a
candidate one; prints each, the reference's most, and whether every
candidate stage holds at most that ("within" or "OVER")."""
import re
import sys


def activation(path):
    text = open(path).read()
    kind = re.search(r"schedule '([^']+)'", text).group(1)
    stage = re.search(r"below, stage (\d+)", text).group(1)
    get = lambda label: int(re.search(r"^  " + label + r" +(\d+) B", text, re.M).group(1))
    return kind, stage, get("pipeline") + get("stage arena")


args = sys.argv[1:]
cut = args.index("--")
reference = [activation(p) for p in args[:cut]]
candidate = [activation(p) for p in args[cut + 1:]]
for kind, stage, n in reference + candidate:
    print(f"{kind} stage {stage}: {n} B")
most = max(n for _, _, n in reference)
print(f"{reference[0][0]} most: {most} B")
for kind, stage, n in candidate:
    print(f"{kind} stage {stage}: {'within' if n <= most else 'OVER'} {reference[0][0]}'s most")
