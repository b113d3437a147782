#!/usr/bin/env python3
"""Fuzzes dist-partition with random valid shardings on the reference models.

Pass options (keep-partial-results, vocab-parallel-cross-entropy) are drawn
at random too.

For each case: a model (mlp, gpt, llama), a random mesh, and for every
function argument a random valid sharding (per dimension, unused mesh axes
whose product divides the dimension's size; often none). Then
`partita-opt --dist-propagate --dist-partition` must either succeed, printing
IR that partita-opt parses and verifies again (local shapes consistent with
the mesh, every collective verified), or fail with a diagnostic at a location.
A crash, a hang, or output that does not verify fails the test.

With --padded, the models have sizes the meshes do not divide (batch 6,
vocabulary 30, ffn 22) and a dimension may take axes that do not divide it
when it has at least one element per shard: dist-partition pads it.

Prints one summary line; exits 1 on the first bad case, printing its input.
"""

import argparse
import random
import re
import subprocess
import sys

MODELS = {
    "mlp": ["mlp", "--layers", "2", "--hidden", "16", "--vocab", "8",
            "--batch", "4"],
    "gpt": ["gpt", "--layers", "1", "--hidden", "16", "--heads", "4",
            "--seq", "8", "--vocab", "32", "--batch", "4", "--ffn", "32"],
    "llama": ["llama", "--layers", "1", "--hidden", "16", "--heads", "4",
              "--kv-heads", "2", "--seq", "8", "--vocab", "32", "--batch", "4",
              "--ffn", "32"],
}
MESHES = [
    [("x", 2)],
    [("x", 4)],
    [("x", 2), ("y", 2)],
    [("dp", 2), ("tp", 4)],
    [("a", 2), ("b", 2), ("c", 2)],
]
PADDED_MODELS = {
    "mlp": ["mlp", "--layers", "2", "--hidden", "16", "--vocab", "7",
            "--batch", "6", "--ffn", "22"],
    "gpt": ["gpt", "--layers", "1", "--hidden", "16", "--heads", "4",
            "--seq", "8", "--vocab", "30", "--batch", "6", "--ffn", "22"],
    "llama": ["llama", "--layers", "1", "--hidden", "16", "--heads", "4",
              "--kv-heads", "2", "--seq", "6", "--vocab", "30", "--batch", "6",
              "--ffn", "22"],
}
PADDED_MESHES = MESHES + [[("x", 3)], [("x", 4), ("y", 3)]]
ARG = re.compile(r"(%[\w.]+): tensor<([0-9x]+)x(f32|i32)> \{")


def random_sharding(rng, shape, mesh, padded=False):
    unused = [axis for axis in mesh]
    rng.shuffle(unused)
    dims = []
    for size in shape:
        axes = []
        if rng.random() < 0.5:
            for name, axis_size in list(unused):
                product = axis_size
                for a in axes:
                    product *= dict(mesh)[a]
                fits = size % product == 0 or (padded and size >= product)
                if fits and rng.random() < 0.6:
                    axes.append(name)
                    unused.remove((name, axis_size))
        dims.append("{" + ", ".join('"%s"' % a for a in axes) + "}")
    return "#dist.sharding<@mesh, [" + ", ".join(dims) + "]>"


def make_case(rng, model_text, padded=False):
    mesh = rng.choice(PADDED_MESHES if padded else MESHES)
    mesh_text = ", ".join('"%s"=%d' % axis for axis in mesh)

    def annotate(match):
        shape = [int(s) for s in match.group(2).split("x")]
        sharding = random_sharding(rng, shape, mesh, padded)
        return "%s: tensor<%sx%s> {dist.sharding = %s, " % (
            match.group(1), match.group(2), match.group(3), sharding)

    text = ARG.sub(annotate, model_text)
    return text.replace("module {", "module {\n  dist.mesh @mesh <[%s]>" %
                        mesh_text, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--partita", required=True)
    parser.add_argument("--partita-opt", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--padded", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    models = {}
    for name, flags in (PADDED_MODELS if args.padded else MODELS).items():
        models[name] = subprocess.run([args.partita, "model"] + flags,
                                      check=True, capture_output=True,
                                      text=True).stdout

    partitioned = diagnosed = 0
    for case in range(args.cases):
        model = rng.choice(sorted(models))
        text = make_case(rng, models[model], args.padded)
        options = []
        if rng.random() < 0.3:
            options.append("keep-partial-results=false")
        if rng.random() < 0.5:
            options.append("vocab-parallel-cross-entropy=true")
        partition = "--dist-partition"
        if options:
            partition += "=" + " ".join(options)
        # A case takes about 0.2 s; the timeout only catches a hang (60 s
        # was reached once on a machine running ctest -j2 beside lit).
        run = subprocess.run(
            [args.partita_opt, "-", "--dist-propagate", partition],
            input=text, capture_output=True, text=True, timeout=300)
        bad = None
        if run.returncode == 0:
            again = subprocess.run([args.partita_opt, "-"], input=run.stdout,
                                   capture_output=True, text=True, timeout=300)
            if again.returncode != 0:
                bad = "output does not verify:\n" + again.stderr
            elif "dist.mesh = @mesh" not in run.stdout:
                bad = "output is not partitioned:\n" + run.stdout
            else:
                partitioned += 1
        elif run.returncode == 1 and re.search(r"<stdin>:\d+:\d+: error: ",
                                               run.stderr):
            # A verifier's complaint ("'dist.x' op ...") means a pass wrote
            # wrong IR: only the passes' own diagnostics are acceptable.
            if re.search(r"error: '[\w.]+' op ", run.stderr):
                bad = "a pass produced IR that does not verify:\n" + run.stderr
            else:
                diagnosed += 1
        else:
            bad = "exit code %d without a located diagnostic:\n%s" % (
                run.returncode, run.stderr)
        if bad:
            print("case %d (%s, %s): %s\ninput:\n%s" %
                  (case, model, partition, bad, text))
            return 1
    print("fuzz: %d cases, %d partitioned, %d diagnosed" %
          (args.cases, partitioned, diagnosed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
