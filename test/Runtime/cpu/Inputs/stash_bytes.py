"""stash_bytes.py EXPLAIN...: for each `partita explain` output of a
pipelined plan, its schedule and the bytes one microbatch keeps from
stage 0's forward for its backward: the stash, plus the weight stash when
the backward is split into B and W (zb-h1)."""
import re
import sys

for path in sys.argv[1:]:
    text = open(path).read()
    kind = re.search(r"schedule '([^']+)'", text).group(1)
    line = next(l for l in text.splitlines() if l.lstrip().startswith("pipeline ") and " = " in l)
    parts = dict((name, int(bytes_)) for name, bytes_ in
                 re.findall(r"((?:weight )?stash) \d+ x (\d+) B", line))
    print(f"{kind}: kept per microbatch {sum(parts.values())} B")
