#!/usr/bin/env python3
"""Mutation harness for checkpoints (issue 14): saves a small sharded
checkpoint (gpt, AdamW, zero2 on 2 local ranks), then loads mutated copies
of it and classifies every load:

  detected  partita run exits 1 with an error line naming the checkpoint
  benign    it loads, and gives exactly what the original gives (same start
            step, loss and every result array, byte for byte): the mutation
            changed nothing a load reads (a stray file, an informational
            field, DIR moved to DIR.old)
  FAILURE   a crash (a signal, another exit code, "unexpected failure"), a
            hang (no exit within --timeout seconds), an error that does not
            name the checkpoint, or a silent load of corrupt data (exit 0
            and a different result)

Mutations: truncate a file, flip bits of a byte, delete or rename a file,
swap two files, put a FIFO or a directory in a file's place, add a stray
file, edit a manifest field (numbers, names, dtypes, shapes, roles, CRCs;
half of them with the manifest's checksum rewritten, so that they reach
the field checks), drop or repeat a manifest line, and move the checkpoint
to DIR.old. Runs --count mutants (at least), then more until --budget
seconds have passed; prints a summary and exits non-zero on any FAILURE.

  scripts/mutate-checkpoints.py --partita build/bin/partita --work /tmp/m
"""
import argparse
import concurrent.futures
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import time
import zlib

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--partita", default="partita")
parser.add_argument("--work", required=True)
parser.add_argument("--count", type=int, default=200)
parser.add_argument("--budget", type=float, default=0,
                    help="seconds; after --count, go on until this many")
parser.add_argument("--seed", type=int, default=14)
parser.add_argument("--timeout", type=float, default=30)
parser.add_argument("--jobs", type=int, default=2)
parser.add_argument("--verbose", action="store_true",
                    help="print every mutant and its verdict")
args = parser.parse_args()

work = os.path.abspath(args.work)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def partita(*argv, timeout=None):
    return subprocess.run([args.partita, *argv], capture_output=True,
                          text=True, timeout=timeout)


def must(*argv):
    p = partita(*argv)
    if p.returncode != 0:
        sys.exit(f"partita {' '.join(argv)} failed:\n{p.stdout}{p.stderr}")
    return p


model, plan = os.path.join(work, "gpt.mlir"), os.path.join(work, "z2.pb")
original = os.path.join(work, "original")
must("model", "gpt", "--layers", "1", "--hidden", "16", "--heads", "2",
     "--seq", "8", "--batch", "4", "--vocab", "256", "-o", model)
must("plan", model, "--train", "adamw", "--strategy", "zero2", "--mesh",
     "dp=2", "--quiet", "-o", plan)
must("run", plan, "--steps", "2", "--save-checkpoint", original)


def read_dir(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def load(ck, out):
    """Loads `ck` and takes one step: (returncode, stdout, stderr, digest);
    returncode None when it did not exit within the timeout."""
    try:
        p = partita("run", plan, "--steps", "1", "--load-checkpoint", ck,
                    "--outputs", out, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, "", "", None
    digest = None
    if p.returncode == 0:
        start = re.search(r"after (\d+) step", p.stdout)
        loss = re.search(r"^step \d+/\d+  loss (\S+)", p.stdout, re.M)
        digest = (start and start.group(1), loss and loss.group(1),
                  read_dir(out) if os.path.isdir(out) else None)
    return p.returncode, p.stdout, p.stderr, digest


_, _, _, reference = load(original, os.path.join(work, "reference-out"))
if reference is None or reference[2] is None:
    sys.exit("the original checkpoint does not load")
files = sorted(os.listdir(original))


def reseal(text):
    body = text[: text.rindex("end ")] if "\nend " in text else text
    return body + "end %08x\n" % zlib.crc32(body.encode())


FIELD_VALUES = ["0", "1", "-1", "2", "3", "100", "16777217", "4294967296",
                "9007199254740992", "9223372036854775807",
                "99999999999999999999", "x", "", "f64", "i32", "state",
                "parameter", "scalar", "-", "0,0", "1,1", "128,0", "64,16",
                "256x16", "16", "deadbeef", "00000000", "wte.npy",
                "../wte.npy", "manifest.txt", "wte", "lm_head", "step"]


def mutate(rng, ck):
    """Applies one random mutation to checkpoint folder `ck`; returns its
    description."""
    kind = rng.choice(["truncate", "flip", "flip", "delete", "rename", "swap",
                       "fifo", "directory", "stray", "field", "field",
                       "field", "field", "line", "old"])
    name = rng.choice(files)
    path = os.path.join(ck, name)
    manifest = os.path.join(ck, "manifest.txt")
    if kind == "truncate":
        size = os.path.getsize(path)
        n = rng.randrange(0, size) if size else 0
        with open(path, "r+b") as f:
            f.truncate(n)
        return f"truncate {name} to {n} bytes"
    if kind == "flip":
        data = bytearray(open(path, "rb").read())
        at = rng.randrange(len(data))
        mask = rng.randrange(1, 256)
        data[at] ^= mask
        open(path, "wb").write(data)
        return f"flip {name} byte {at} by {mask:#x}"
    if kind == "delete":
        os.remove(path)
        return f"delete {name}"
    if kind == "rename":
        other = rng.choice(files + ["stray.npy"])
        os.replace(path, os.path.join(ck, other))
        return f"rename {name} to {other}"
    if kind == "swap":
        other = rng.choice(files)
        tmp = path + ".swap"
        os.replace(path, tmp)
        os.replace(os.path.join(ck, other), path)
        os.replace(tmp, os.path.join(ck, other))
        return f"swap {name} and {other}"
    if kind == "fifo":
        os.remove(path)
        os.mkfifo(path)
        return f"FIFO in place of {name}"
    if kind == "directory":
        os.remove(path)
        os.mkdir(path)
        return f"directory in place of {name}"
    if kind == "stray":
        open(os.path.join(ck, "stray.npy"), "wb").write(b"not an array")
        os.makedirs(ck + ".partial", exist_ok=True)
        return "stray files beside the checkpoint"
    if kind == "old":
        os.replace(ck, ck + ".old")
        return "checkpoint moved to DIR.old"
    text = open(manifest).read()
    lines = text.splitlines(keepends=True)
    sealed = rng.random() < 0.5
    if kind == "line":
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            del lines[i]
            what = f"drop manifest line {i + 1}"
        else:
            lines.insert(rng.randrange(len(lines)), lines[i])
            what = f"repeat manifest line {i + 1}"
    else:
        i = rng.randrange(len(lines))
        words = lines[i].split()
        j = rng.randrange(len(words))
        words[j] = rng.choice(FIELD_VALUES)
        lines[i] = " ".join(words) + "\n"
        what = f"manifest line {i + 1} field {j + 1} = '{words[j]}'"
    text = "".join(lines)
    if sealed:
        text = reseal(text)
        what += " (resealed)"
    open(manifest, "w").write(text)
    return what


def one(i):
    rng = random.Random(args.seed * 1000003 + i)
    ck = os.path.join(work, f"m{i}")
    for d in (ck, ck + ".old", ck + ".partial"):
        shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(original, ck)
    what = mutate(rng, ck)
    out = os.path.join(work, f"out{i}")
    start = time.time()
    rc, stdout, stderr, digest = load(ck, out)
    seconds = time.time() - start
    if rc is None:
        verdict = "FAILURE hang"
    elif rc < 0 or rc not in (0, 1):
        verdict = f"FAILURE crash (exit {rc})"
    elif re.search(r"unexpected failure|terminate called|LLVM ERROR|"
                   r"Assertion|Sanitizer|Segmentation", stderr):
        verdict = "FAILURE crash: " + stderr.strip().splitlines()[-1]
    elif rc == 1:
        error = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        verdict = ("detected" if "error:" in error and f"m{i}" in error
                   else "FAILURE error without the checkpoint's name: " + error)
    elif digest == reference:
        verdict = "benign"
    else:
        verdict = "FAILURE silent load of corrupt data"
    for d in (ck, ck + ".old", ck + ".partial", out):
        if os.path.isdir(d):
            # A FIFO or directory mutant needs no special removal.
            shutil.rmtree(d, ignore_errors=True)
    return i, what, verdict, seconds, stderr


started = time.time()
results = []
with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
    i = 0
    pending = set()
    while True:
        enough = i >= args.count and time.time() - started >= args.budget
        if not enough:
            while len(pending) < args.jobs * 2:
                pending.add(pool.submit(one, i))
                i += 1
        if not pending:
            break
        done, pending = concurrent.futures.wait(
            pending, return_when=concurrent.futures.FIRST_COMPLETED)
        results += [f.result() for f in done]

results.sort()
counts = {"detected": 0, "benign": 0}
failures = []
slowest = max(r[3] for r in results)
for i, what, verdict, seconds, stderr in results:
    if verdict.startswith("FAILURE"):
        failures.append((i, what, verdict))
    else:
        counts[verdict] += 1
for i, what, verdict, seconds, stderr in results:
    if args.verbose or verdict.startswith("FAILURE"):
        print(f"mutant {i}: {what}: {verdict}")
print(f"{len(results)} mutated checkpoints (seed {args.seed}): "
      f"{counts['detected']} detected, {counts['benign']} benign, "
      f"{len(failures)} failures (crashes, hangs, unnamed errors, silent "
      f"loads of corrupt data); slowest load {slowest:.1f} s, "
      f"{time.time() - started:.0f} s in all")
sys.exit(1 if failures else 0)
