#!/usr/bin/env python3
"""lit-failures.py RESULTS.json [LINES]: the lit tests that did not pass in a
results file written by `lit -o`, each with the last LINES (default 40) lines
of its output; nothing when all passed. scripts/test.sh prints this after
ctest so that a failure shows at the end of a long CI log."""
import json
import sys

results = json.load(open(sys.argv[1]))
lines = int(sys.argv[2]) if len(sys.argv) > 2 else 40
bad = [t for t in results.get("tests", [])
       if t.get("code") not in ("PASS", "UNSUPPORTED", "XFAIL")]
if bad:
    print(f"lit: {len(bad)} of {len(results['tests'])} tests did not pass:")
    for t in bad:
        print(f"  {t['code']}: {t['name']} ({t.get('elapsed', 0):.1f} s)")
    for t in bad:
        print(f"\n==== {t['code']}: {t['name']}, last {lines} lines of its output")
        print("\n".join(t.get("output", "").splitlines()[-lines:]))
