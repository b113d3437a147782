#!/usr/bin/env python3
"""Plan mutation harness: runs partita-run on mutated copies of sealed plans.

  mutate_plans.py --runner PARTITA_RUN --protoc PROTOC --proto PLAN_PROTO
                  --work DIR [--seed N] [--per-plan N] PLAN.pb[:ARGS] ...

For each plan (ARGS: extra partita-run arguments, comma-separated), it makes
--per-plan mutants of the file's bytes (random byte flips, truncations, and
field edits through protobuf text format: protoc --decode, change one value
or drop one line, protoc --encode) and runs each under a per-run timeout and
a memory limit. Every mutant whose bytes differ from the plan must be
rejected: exit 1 with an error line that names the file. A fifth of the
mutants are then resealed (their checksum recomputed over the changed
content, runtime/plan/PlanChecksum.h), which gets them past the checksum to
plan validation and the executor; those may run or be rejected, but never
crash or hang.

Prints a summary ("plan-mutation: N mutants, ...") and one line per
violation ("plan-mutation: VIOLATION ..." with the seed and the mutant's
file kept under --work); exits 1 if there was any. The seed is random unless
given (or PARTITA_MUTATION_SEED is set), and is printed to replay a run.
"""
import argparse
import concurrent.futures
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time

TIMEOUT_S = 20
MEMORY_BYTES = 4 << 30
SEAL = 14  # checksum tag + 8 bytes, trailer tag + 4 bytes
TRAILER = 0x4E414C50


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h or 1


def reseal(data):
    """The bytes with a checksum that matches their content, or None when
    they do not end with the checksum and trailer fields."""
    if len(data) < SEAL or data[-SEAL] != 0x71 or data[-5] != 0x7D:
        return None
    content = data[:-SEAL]
    return (content + b"\x71" + fnv1a(content).to_bytes(8, "little") +
            b"\x7d" + TRAILER.to_bytes(4, "little"))


def flip(rng, data):
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 4])):
        i = rng.randrange(len(out))
        out[i] ^= rng.choice([1, 2, 4, 8, 16, 32, 64, 128, rng.randrange(1, 256)])
    return bytes(out)


def truncate(rng, data):
    return data[:rng.randrange(0, len(data))]


SCALAR = re.compile(r"^(\s*)(\w+): (.+)$")


def edit_value(rng, value, enums):
    if value in ("true", "false"):
        return "false" if value == "true" else "true"
    if value.startswith('"'):
        return rng.choice(['""', value[:-1] + 'x"', '"dp"', '"tp"', '"loss"',
                           '"reference"'])
    if re.fullmatch(r"[A-Z_0-9]+", value):
        return rng.choice(enums)
    try:
        v = int(value)
        return str(rng.choice([v + 1, v - 1, 0, -1, 2 * v, v + 64, 1 << 31,
                               1 << 40, 1 << 62, -(1 << 40), 7]))
    except ValueError:
        pass
    try:
        v = float(value)
        return rng.choice([repr(v * 2), "0", repr(-v), "1e300", "nan", "inf",
                           repr(v + 1e-3)])
    except ValueError:
        return value


def text_edit(rng, lines, enums, args):
    """One changed value (or one dropped scalar line), encoded; None when
    protoc rejects the edit (a value out of its field's range)."""
    scalars = [i for i, l in enumerate(lines) if SCALAR.match(l)]
    i = rng.choice(scalars)
    out = list(lines)
    if rng.random() < 0.2:
        del out[i]
    else:
        indent, key, value = SCALAR.match(lines[i]).groups()
        out[i] = f"{indent}{key}: {edit_value(rng, value, enums)}"
    r = subprocess.run([args.protoc, "--encode=partita.plan.Plan", "-I",
                        os.path.dirname(os.path.dirname(args.proto)),
                        "plan/plan.proto"], input="\n".join(out).encode(),
                       capture_output=True)
    return r.stdout if r.returncode == 0 else None


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run(args, path, extra):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    start = time.monotonic()
    try:
        # A sanitized runner reserves terabytes of shadow address space: it
        # limits its heap itself (ASAN_OPTIONS, scripts/sanitize.sh).
        r = subprocess.run([args.runner, path] + extra, capture_output=True,
                           timeout=TIMEOUT_S, env=env,
                           preexec_fn=None if args.sanitized else limit_memory)
    except subprocess.TimeoutExpired:
        return "hang", "", time.monotonic() - start
    return r.returncode, r.stderr.decode(errors="replace"), \
        time.monotonic() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runner", required=True)
    p.add_argument("--protoc", required=True)
    p.add_argument("--proto", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seed", type=int,
                   default=int(os.environ.get("PARTITA_MUTATION_SEED",
                                              random.randrange(1 << 30))))
    p.add_argument("--per-plan", type=int, default=600)
    p.add_argument("--sanitized", action="store_true",
                   help="the runner is built with ASan/UBSan: no address-space "
                        "limit, and any sanitizer report is a crash")
    p.add_argument("plans", nargs="+")
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"plan-mutation: seed {args.seed}", flush=True)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    jobs = []  # (path, extra args, must_reject, kind)
    for k, spec in enumerate(args.plans):
        path, _, extra = spec.partition(":")
        extra = [a for a in extra.split(",") if a]
        data = open(path, "rb").read()
        text = subprocess.run([args.protoc, "--decode=partita.plan.Plan", "-I",
                               os.path.dirname(os.path.dirname(args.proto)),
                               "plan/plan.proto"], input=data,
                              capture_output=True, check=True).stdout
        lines = text.decode().splitlines()
        enums = sorted(set(re.findall(r": ([A-Z][A-Z_0-9]+)$", text.decode(),
                                      re.M)) | {"ADAMW", "SGD", "HOST",
                                                "MAX", "SLICE", "INPUT"})
        made = 0
        while made < args.per_plan:
            kind = rng.choices(["flip", "truncate", "text"], [5, 2, 3])[0]
            if kind == "flip":
                mutant = flip(rng, data)
            elif kind == "truncate":
                mutant = truncate(rng, data)
            else:
                mutant = text_edit(rng, lines, enums, args)
                if mutant is None:
                    continue
            sealed = rng.random() < 0.2 and reseal(mutant)
            if sealed:
                mutant, kind = sealed, kind + "+resealed"
            name = os.path.join(args.work, f"p{k}-{made}-{kind}.pb")
            with open(name, "wb") as f:
                f.write(mutant)
            jobs.append((name, extra, mutant != data and not sealed, kind))
            made += 1

    violations, counts = [], {}
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda j: run(args, j[0], j[1]), jobs)
        for (name, extra, must_reject, kind), (rc, err, took) in zip(jobs,
                                                                      results):
            outcome = ("hang" if rc == "hang" else "ran" if rc == 0 else
                       "rejected" if rc == 1 else "crash")
            if "Sanitizer" in err or "runtime error:" in err:
                outcome = "crash"
            counts[outcome] = counts.get(outcome, 0) + 1
            bad = None
            if outcome in ("hang", "crash"):
                bad = f"{outcome} (exit {rc})"
            elif must_reject and outcome == "ran":
                bad = "a changed plan ran without a checksum error"
            elif must_reject and (name not in err or "error:" not in err):
                bad = "rejected without an error that names the file"
            if bad:
                violations.append(name)
                last = err.strip().splitlines()[-1:] or [""]
                print(f"plan-mutation: VIOLATION {name} ({kind}): {bad}: "
                      f"{last[0][:300]}", flush=True)
            else:
                os.remove(name)
    must = sum(1 for j in jobs if j[2])
    print(f"plan-mutation: {len(jobs)} mutants ({must} changed and unsealed, "
          f"{len(jobs) - must} resealed or unchanged) in "
          f"{time.monotonic() - start:.0f} s: " +
          ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
          flush=True)
    print(f"plan-mutation: {len(violations)} violations", flush=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
