#!/usr/bin/env python3
"""Runs every ```sh block of the given Markdown files, as written.

  scripts/check-doc-commands.py BUILD_DIR FILE.md...

Each file's blocks run in order, each as one `bash -e -o pipefail` script,
in one scratch folder per file (so a later block can use what an earlier one
wrote, as a reader following the page would). The folder links to every
top-level entry of the source tree (examples/, scripts/, ...) and `build`
to BUILD_DIR, so `build/bin/partita` and `examples/train/...` resolve as in
a checkout; BUILD_DIR/bin is first on PATH, so a bare `partita` works too.

A block that cannot run here (it needs a GPU, many MPI processes, minutes
of training, or builds the project) carries a marker on the line before it:

  <!-- doc-test: skip (why) -->

Skipped blocks are counted and listed with their reasons, never as passed.
A failing block is named by file and line, with its output's tail; the
exit status is 1 if any block failed.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```([\w+.-]*)\s*$")
SKIP = re.compile(r"^<!--\s*doc-test:\s*skip\s*\((.+)\)\s*-->\s*$")
MARKER = re.compile(r"doc-test")
TIMEOUT_S = 600


def blocks(path):
    """Yields (line, language, text, skip reason or None, marker error)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not FENCE.match(lines[j]):
            j += 1
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        reason, error = None, None
        if prev >= 0 and MARKER.search(lines[prev]):
            s = SKIP.match(lines[prev].strip())
            if s:
                reason = s.group(1).strip()
            else:
                error = ("malformed marker (expected "
                         "'<!-- doc-test: skip (why) -->'): " + lines[prev])
        yield start + 1, lang, "\n".join(lines[start + 1:j]), reason, error
        i = j + 1


def scratch(src, build):
    """A folder that looks like a checkout with its build in build/."""
    d = tempfile.mkdtemp(prefix="partita-doc-")
    for name in os.listdir(src):
        if name in ("build", ".git") or name.startswith("build"):
            continue
        os.symlink(os.path.join(src, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    build = os.path.abspath(argv[1])
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    # The system's folders too: lit runs this with a PATH of its tools only.
    env["PATH"] = os.pathsep.join([os.path.join(build, "bin"),
                                   env.get("PATH", ""), os.defpath])
    bash = shutil.which("bash", path=env["PATH"]) or "/bin/bash"
    passed, skipped, failed = [], [], []
    for doc in argv[2:]:
        doc = os.path.abspath(doc)
        rel = os.path.relpath(doc, src)
        work = scratch(src, build)
        for line, lang, text, reason, error in blocks(doc):
            where = f"{rel}:{line}"
            if error:
                failed.append(where)
                print(f"FAIL {where}: {error}")
                continue
            if lang not in ("sh", "bash", "shell"):
                continue
            if reason:
                skipped.append((where, reason))
                print(f"SKIP {where}: {reason}")
                continue
            begin = time.time()
            try:
                r = subprocess.run([bash, "-e", "-o", "pipefail", "-c", text],
                                   cwd=work, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT,
                                   timeout=TIMEOUT_S)
                rc, out = r.returncode, r.stdout
            except subprocess.TimeoutExpired as e:
                rc, out = f"timeout after {TIMEOUT_S} s", e.stdout or b""
            took = time.time() - begin
            if rc == 0:
                passed.append(where)
                print(f"PASS {where} ({took:.1f} s)")
                continue
            failed.append(where)
            tail = out.decode("utf-8", "replace").rstrip().split("\n")[-25:]
            print(f"FAIL {where}: exit status {rc} ({took:.1f} s); the block:")
            print("\n".join("    " + l for l in text.split("\n")))
            print("  its output (last lines):")
            print("\n".join("    " + l for l in tail))
        shutil.rmtree(work)  # the links only, not what they point to
    print(f"doc commands: {len(passed)} blocks passed, {len(failed)} failed, "
          f"{len(skipped)} skipped (not run, not counted as passed)")
    for where, reason in skipped:
        print(f"  skipped {where}: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
