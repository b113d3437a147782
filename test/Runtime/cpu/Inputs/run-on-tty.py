"""Runs a command with its stdout and stderr on a pseudo-terminal.

  run-on-tty.py COMMAND...

Prints what the command wrote (as text, carriage returns and colour escape
sequences dropped) and then
"exit status N", for tests of behaviour that depends on isatty(stdout).
"""
import os
import pty
import re
import subprocess
import sys

master, slave = pty.openpty()
proc = subprocess.Popen(sys.argv[1:], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
os.close(slave)
chunks = []
while True:
    try:
        data = os.read(master, 65536)
    except OSError:  # EIO: the other side closed
        break
    if not data:
        break
    chunks.append(data)
status = proc.wait()
text = b"".join(chunks).decode("utf-8", "replace").replace("\r", "")
sys.stdout.write(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text))
print("exit status %d" % status)
