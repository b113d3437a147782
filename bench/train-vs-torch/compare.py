"""`partita train` against the same training in PyTorch: validation loss curves.

  /usr/bin/python3 bench/train-vs-torch/compare.py [CONFIG.toml] [--steps N]
      [--build build] [--workdir runs/train-vs-torch] [--png out.png]
      [--threads 1]

Runs `partita train CONFIG` (fresh: its checkpoints go under WORKDIR), then
trains the same model in PyTorch (float32, Debian's python3-torch) from the
same initial parameters, exported by Partita (a train step of the same
model with SGD at lr 0 leaves them as they are: `partita run
--save-params`), on the same batches (TokenData.h's windows of the same
byte-level split), with the same AdamW hyperparameters, the same clipping
by global norm (torch.nn.utils.clip_grad_norm_: coef = c / (norm + 1e-6),
at most 1, as nn-autodiff's clip) and the same learning-rate schedule
(Schedule.h's formula), evaluating the same validation batches at the same
steps. The model is test/Training/torch/Inputs/torch_reference.py's, run in
float32 here. Prints both validation losses at every evaluation with their
relative difference, writes PyTorch's metrics as JSONL beside Partita's and
draws both with scripts/plot-metrics.py. Exits 1 when an evaluation differs
by more than 2%. Only the gpt family with an untied head.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
import tomllib

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "Training", "torch", "Inputs"))
import torch_reference  # noqa: E402  (the model, in PyTorch)

# torch_reference imports PyTorch lazily (its `inputs` mode needs none).
torch_reference.torch, torch_reference.F = torch, torch.nn.functional


def lr_at(s, step):
    """Schedule.h's learningRateAt."""
    if step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    if s["kind"] == "constant":
        return s["lr"]
    span = max(1, s["decay"] - s["warmup"])
    p = min(max((step - s["warmup"]) / span, 0.0), 1.0)
    if s["kind"] == "linear":
        return s["lr"] + (s["min_lr"] - s["lr"]) * p
    return s["min_lr"] + (s["lr"] - s["min_lr"]) * 0.5 * (1 + math.cos(math.pi * p))


def batch(tokens, step, B, S):
    """TokenData::batch: windows of S + 1 tokens, wrapping."""
    n = len(tokens)
    ids = np.empty((B, S), np.int64)
    labels = np.empty((B, S), np.int64)
    for row in range(B):
        start = ((step * B + row) % n) * (S + 1) % n
        idx = (start + np.arange(S + 1)) % n
        ids[row], labels[row] = tokens[idx[:-1]], tokens[idx[1:]]
    return torch.from_numpy(ids), torch.from_numpy(labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=os.path.join(ROOT, "examples/train/gpt-small.toml"))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--partita", help="the partita executable (default BUILD/bin/partita)")
    ap.add_argument("--workdir", default="runs/train-vs-torch")
    ap.add_argument("--png")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    partita = a.partita or os.path.join(a.build, "bin", "partita")
    m, opt, tr = cfg["model"], cfg.get("optimizer", {}), cfg["train"]
    data, ev, sch = cfg.get("data", {}), cfg.get("eval", {}), cfg.get("schedule", {})
    if m.get("family") != "gpt" or m.get("tied"):
        sys.exit("compare.py: only the gpt family with an untied head")
    if opt.get("name", "adamw") != "adamw" or data.get("format", "bytes") != "bytes" \
            or "val_fraction" not in data:
        sys.exit("compare.py: needs adamw, byte-level data and data.val_fraction")
    steps = a.steps or tr["steps"]
    B, S = tr.get("batch", 8), tr.get("seq", 64)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    pj = os.path.join(a.workdir, "partita.jsonl")

    # Partita.
    t0 = time.time()
    subprocess.run([partita, "train", a.config, "--train.steps", str(steps),
                    "--checkpoint.dir", os.path.join(a.workdir, "ck"),
                    "--log.metrics", pj, "--log.progress", "plain", "--log.every", "50"],
                   check=True)
    partita_s = time.time() - t0

    # Partita's initial parameters.
    model = os.path.join(a.workdir, "model.mlir")
    sizes = ["--layers", m.get("layers", 2), "--hidden", m.get("hidden", 64),
             "--heads", m.get("heads", 4), "--vocab", m.get("vocab", 256),
             "--batch", B, "--seq", S] + (["--ffn", m["ffn"]] if "ffn" in m else [])
    subprocess.run([partita, "model", "gpt"] + [str(x) for x in sizes] + ["-o", model], check=True)
    seed = str(tr.get("seed", 0))
    if seed != "0":
        sys.exit("compare.py: train.seed must be 0 (partita plan's seed)")
    sgd0 = os.path.join(a.workdir, "sgd0.pb")
    subprocess.run([partita, "plan", model, "--train", "sgd", "--lr", "0", "--strategy", "none",
                    "--quiet", "-o", sgd0], check=True)
    init = os.path.join(a.workdir, "init")
    subprocess.run([partita, "run", sgd0, "--save-params", init], check=True,
                   stdout=subprocess.DEVNULL)

    # PyTorch, float32.
    torch.set_num_threads(a.threads)
    parsed = torch_reference.parse_model(model)
    params = {x["name"]: torch.tensor(np.load(os.path.join(init, x["name"] + ".npy")),
                                      requires_grad=True)
              for x in parsed["args"] if x["role"] == "param"}
    plist = list(params.values())
    lr = opt.get("lr", 1e-3)
    adam = torch.optim.AdamW(plist, lr=lr, betas=(opt.get("beta1", 0.9), opt.get("beta2", 0.999)),
                             eps=opt.get("eps", 1e-8), weight_decay=opt.get("weight_decay", 0.0))
    clip = opt.get("clip_norm", 0.0)
    sched = dict(kind=sch.get("kind", "constant"), lr=lr, min_lr=sch.get("min_lr", 0.1 * lr),
                 warmup=sch.get("warmup_steps", 0), decay=sch.get("decay_steps", steps))
    if not sch:
        sched.update(kind="constant", warmup=0)
    path = data.get("train", "/usr/share/common-licenses/GPL-3")
    tokens = np.frombuffer(open(path, "rb").read(), np.uint8).astype(np.int64)
    cut = int((1 - data["val_fraction"]) * len(tokens))
    train, val = tokens[:cut], tokens[cut:]
    every, nval = ev.get("every", 0), ev.get("batches", 4)
    tj = os.path.join(a.workdir, "torch.jsonl")
    t0 = time.time()
    with open(tj, "w") as out:
        for step in range(steps):
            for g in adam.param_groups:
                g["lr"] = lr_at(sched, step)
            ids, labels = batch(train, step, B, S)
            begin = time.time()
            loss, _ = torch_reference.forward(parsed, params, ids, labels)
            adam.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(plist, clip) if clip > 0 else None
            adam.step()
            seconds = time.time() - begin
            out.write(json.dumps(dict(type="step", step=step + 1, loss=loss.item(),
                                      lr=lr_at(sched, step),
                                      grad_norm=None if norm is None else norm.item(),
                                      tokens_per_s=B * S / seconds)) + "\n")
            done = step + 1
            if (every and done % every == 0) or done == steps:
                with torch.no_grad():
                    vl = sum(torch_reference.forward(parsed, params, *batch(val, b, B, S))[0].item()
                             for b in range(nval)) / nval
                out.write(json.dumps(dict(type="eval", step=done, val_loss=vl,
                                          val_perplexity=math.exp(vl))) + "\n")
    torch_s = time.time() - t0

    def evals(path):
        return {r["step"]: r["val_loss"] for r in map(json.loads, open(path)) if r["type"] == "eval"}

    pe, te = evals(pj), evals(tj)
    worst = 0.0
    print("step   partita val loss   pytorch val loss   rel diff")
    for s in sorted(te):
        rel = abs(pe[s] - te[s]) / abs(te[s])
        worst = max(worst, rel)
        print("%5d   %16.5f   %16.5f   %8.2e" % (s, pe[s], te[s], rel))
    print("compare: %d evaluations, worst relative difference %.2e (%s, limit 2%%); "
          "partita train %.1f s (with its evaluations and checkpoints), pytorch %.1f s"
          % (len(te), worst, "ok" if worst <= 0.02 else "FAILED", partita_s, torch_s))
    if a.png:
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "plot-metrics.py"),
                        pj, tj, "--labels", "partita,pytorch", "-o", a.png], check=True)
    sys.exit(0 if worst <= 0.02 and set(pe) >= set(te) else 1)


if __name__ == "__main__":
    main()
