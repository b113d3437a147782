"""kill_checkpoint_saves.py PARTITA PLAN WORK [POINTS] [SEED]: kills a save
that overwrites the checkpoint it started from (--load-checkpoint ck
--save-checkpoint ck) at POINTS random points (after N bytes, part way
through a file; after N files; at each stage of the commit), from four
starting states (a clean checkpoint; only ck.old, as a save that died
between its renames leaves it; a stale ck.partial; a stale damaged ck.old),
and checks that every time a load gives either the old checkpoint or the
new one, bit for bit: the directory it loads holds exactly the old or the
new checkpoint's files, byte for byte, and one training step from it gives
the old's or the new's step number, loss and every result array, byte for
byte. Prints a summary line; exits non-zero on the first mismatch."""
import os
import random
import re
import shutil
import subprocess
import sys

partita, plan, work = sys.argv[1:4]
points = int(sys.argv[4]) if len(sys.argv) > 4 else 20
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 14
rng = random.Random(seed)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def run(*args, check=True):
    p = subprocess.run([partita, "run", plan, *args], capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        sys.exit(f"partita run {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return p


def path(name):
    return os.path.join(work, name)


def files_of(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def digest(ck):
    """What a load of `ck` gives: the step it starts from, the loss of one
    step from it and every result array (parameters and optimizer state
    after that step), as bytes."""
    out = path("digest-out")
    shutil.rmtree(out, ignore_errors=True)
    p = run("--steps", "1", "--load-checkpoint", ck, "--outputs", out)
    start = re.search(r"starting from checkpoint .* after (\d+) step", p.stdout)
    loss = re.search(r"^step \d+/\d+  loss (\S+)", p.stdout, re.M)
    return (start.group(1), loss.group(1), files_of(out))


def loaded_dir(ck):
    # The loader's rule (Checkpoint.h): DIR, or DIR.old when DIR is gone.
    return ck if os.path.exists(ck) else ck + ".old"


run("--steps", "2", "--save-checkpoint", path("old"))
shutil.copytree(path("old"), path("base"))
run("--steps", "1", "--load-checkpoint", path("base"), "--save-checkpoint",
    path("new"))
old, new = files_of(path("old")), files_of(path("new"))
old_digest, new_digest = digest(path("old")), digest(path("new"))
if old_digest == new_digest:
    sys.exit("the old and the new checkpoint load the same: no test")

# How much a rank writes: its shards (manifest's BYTES by RANK) and its
# part of the manifest; a point is drawn over the largest.
per_rank_bytes, per_rank_files = {}, {}
for line in new["manifest.txt"].decode().splitlines():
    f = line.split()
    if f[0] == "shard":
        r = int(f[7])
        per_rank_bytes[r] = per_rank_bytes.get(r, 0) + int(f[5]) + len(line) + 1
        per_rank_files[r] = per_rank_files.get(r, 0) + 1
most_bytes = max(per_rank_bytes.values()) + len(new["manifest.txt"])
most_files = max(per_rank_files.values()) + 2

stages = ["shards-written", "manifest-written", "moved-aside", "renamed"]
specs = ["stage:" + s for s in stages]
while len(specs) < points:
    if rng.random() < 0.7:
        specs.append("bytes:%d" % rng.randrange(0, most_bytes))
    else:
        specs.append("files:%d" % rng.randrange(1, most_files))
starts = ["clean", "old-only", "stale-partial", "stale-old"]

counts = {"old": 0, "new": 0}
ck = path("ck")
for i, spec in enumerate(specs):
    start = starts[i % len(starts)]
    for d in (ck, ck + ".old", ck + ".partial"):
        shutil.rmtree(d, ignore_errors=True)
    if start == "old-only":
        shutil.copytree(path("old"), ck + ".old")
    else:
        shutil.copytree(path("old"), ck)
    if start == "stale-partial":
        # A complete-looking leftover with a torn shard: never loaded.
        shutil.copytree(path("new"), ck + ".partial")
        with open(os.path.join(ck + ".partial", "wpe.npy"), "r+b") as f:
            f.truncate(100)
    if start == "stale-old":
        shutil.copytree(path("new"), ck + ".old")
        os.remove(os.path.join(ck + ".old", "manifest.txt"))
    p = run("--steps", "1", "--load-checkpoint", ck, "--save-checkpoint", ck,
            "--inject-checkpoint-failure", spec, check=False)
    died = "injected failure while saving checkpoint" in p.stderr
    if p.returncode != 0 and not died:
        sys.exit(f"point {spec}: the save failed otherwise:\n{p.stderr}")
    got = digest(ck)
    which = "old" if got == old_digest else "new" if got == new_digest else None
    if which is None:
        sys.exit(f"point {spec} from {start}: the load gives neither the old "
                 f"nor the new checkpoint (starts after {got[0]} steps, "
                 f"loss {got[1]})")
    expected = old if which == "old" else new
    if files_of(loaded_dir(ck)) != expected:
        sys.exit(f"point {spec} from {start}: '{loaded_dir(ck)}' does not "
                 f"hold the {which} checkpoint's files byte for byte")
    counts[which] += 1
    print(f"{spec} from {start}: {'killed' if died else 'completed'}, "
          f"loads the {which} checkpoint")

print(f"{len(specs)} kill points (seed {seed}): {counts['old']} load the old "
      f"checkpoint, {counts['new']} the new one, 0 anything else")
