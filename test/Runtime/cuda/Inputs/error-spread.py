#!/usr/bin/env python3
"""Runs a command (an mpirun job), timestamps each line of its combined
output as it arrives, and prints the lines, then how far apart in time the
lines matching PATTERN arrived and how long the job ran after the first:
    error-spread.py PATTERN LIMIT_S COMMAND...
prints "error-spread: N lines within X s; exited R Y s after the first",
and exits 0, leaving the verdict to FileCheck. The job is killed after
LIMIT_S seconds (then "error-spread: still running")."""
import re
import subprocess
import sys
import time

pattern, limit, command = re.compile(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
start = time.monotonic()
proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True)
times = []
for line in proc.stdout:
    now = time.monotonic()
    sys.stdout.write(line)
    if pattern.search(line):
        times.append(now)
    if now - start > limit:
        break
try:
    rc = proc.wait(timeout=max(1.0, limit - (time.monotonic() - start)))
except subprocess.TimeoutExpired:
    proc.kill()
    print("error-spread: still running")
    sys.exit(0)
end = time.monotonic()
if not times:
    print("error-spread: no line matched; exited %d" % rc)
    sys.exit(0)
spread = times[-1] - times[0]
# Whole seconds, rounded up, so a check reads "within 1 s".
print("error-spread: %d lines within %d s; exited %s %d s after the first"
      % (len(times), int(spread) + 1, "0" if rc == 0 else "non-zero",
         int(end - times[0]) + 1))
