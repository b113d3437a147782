"""Runs the pipelines `partita plan --print-pipeline` printed, as printed.

Usage: run-printed-pipelines.py LOG INPUT OUTPUT [EXPECTED]

Takes every "partita plan: <stage>: builtin.module(...)" line of LOG, in
order, and runs `partita-opt --pass-pipeline=<that text>` on INPUT, each
stage on the previous one's output, writing the last module to OUTPUT. With
EXPECTED, fails with a unified diff unless OUTPUT equals it byte for byte.
"""
import difflib
import re
import subprocess
import sys

log, source, output = sys.argv[1:4]
pipelines = []
with open(log) as f:
    for line in f:
        match = re.match(r"partita plan: [a-z]+: (builtin\.module\(.*\))$", line)
        if match:
            pipelines.append(match.group(1))
if not pipelines:
    sys.exit("no pipeline printed in " + log)
current = source
for i, pipeline in enumerate(pipelines):
    target = output if i == len(pipelines) - 1 else f"{output}.{i}"
    subprocess.run(["partita-opt", current, "--pass-pipeline=" + pipeline,
                    "-o", target], check=True)
    current = target
if len(sys.argv) > 4:
    with open(sys.argv[4]) as f:
        expected = f.readlines()
    with open(output) as f:
        actual = f.readlines()
    if actual != expected:
        sys.stdout.writelines(difflib.unified_diff(expected, actual,
                                                   sys.argv[4], output))
        sys.exit(1)
