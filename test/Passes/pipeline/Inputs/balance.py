"""balance.py UNITS SPLIT EQUAL STAGES: reads dist.stage_costs from three
`partita plan --emit differentiated` outputs: UNITS (one stage per layer,
so each layer's cost, the first with the embedding, the last with the head
and loss), SPLIT (--stages-by cost) and EQUAL (--stages-by layers), and
prints the cost split's slowest stage against the best split of whole
layers into STAGES contiguous stages (brute force over every cut) and
against the equal-layer split."""
import itertools
import re
import sys


def costs(path):
    m = re.search(r"dist\.stage_costs = \[([^\]]*)\]", open(path).read())
    return [float(x) for x in m.group(1).split(",")]


units, split, equal = costs(sys.argv[1]), costs(sys.argv[2]), costs(sys.argv[3])
p = int(sys.argv[4])
best = min(
    max(sum(units[a:b]) for a, b in zip((0,) + cuts, cuts + (len(units),)))
    for cuts in itertools.combinations(range(1, len(units)), p - 1))
print(f"{len(units)} layers, {p} stages: {len(list(itertools.combinations(range(1, len(units)), p - 1)))} whole-layer splits")
print(f"cost split slowest / best whole-layer split slowest: {max(split) / best:.3f} "
      f"({'within 5%' if max(split) <= 1.05 * best else 'WORSE'})")
print(f"cost split slowest / equal-layer split slowest: {max(split) / max(equal):.3f} "
      f"({'beats it' if max(split) < max(equal) else 'DOES NOT BEAT IT'})")
