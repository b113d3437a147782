#!/usr/bin/python3
"""Plots partita train's JSONL metrics: loss, learning rate and throughput.

  /usr/bin/python3 scripts/plot-metrics.py METRICS.jsonl [MORE.jsonl ...] -o out.png

Draws three panels against the step: the training loss (and the validation
loss of each evaluation), the learning rate, and tokens per second. Several
files are overlaid, labelled by file name (or --labels a,b). A step logged
twice (before a kill and after the resume) counts once: the later record
wins. Needs matplotlib (Debian's python3-matplotlib).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, evals = {}, {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit("plot-metrics: %s:%d: not JSON: %s" % (path, number, e))
            kind = record.get("type")
            if kind == "step":
                steps[record["step"]] = record
            elif kind == "eval":
                evals[record["step"]] = record
    return [steps[k] for k in sorted(steps)], [evals[k] for k in sorted(evals)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", nargs="+", help="JSONL files from partita train")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--labels", help="comma-separated labels, one per file")
    args = parser.parse_args()
    labels = (args.labels.split(",") if args.labels
              else [os.path.basename(p) for p in args.metrics])
    if len(labels) != len(args.metrics):
        sys.exit("plot-metrics: %d labels for %d files" % (len(labels), len(args.metrics)))
    fig, (loss_ax, lr_ax, tps_ax) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for path, label in zip(args.metrics, labels):
        steps, evals = read(path)
        if not steps:
            sys.exit("plot-metrics: %s holds no step records" % path)
        x = [r["step"] for r in steps]
        line, = loss_ax.plot(x, [r["loss"] for r in steps], label=label + " train", lw=1)
        if evals:
            loss_ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals],
                         "o--", color=line.get_color(), label=label + " validation")
        lr_ax.plot(x, [r["lr"] for r in steps], label=label)
        tps_ax.plot(x, [r["tokens_per_s"] or 0 for r in steps], label=label, lw=1)
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    lr_ax.set_ylabel("learning rate")
    tps_ax.set_ylabel("tokens / s")
    tps_ax.set_xlabel("step")
    for ax in (loss_ax, lr_ax, tps_ax):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print("plot-metrics: wrote %s (%d file%s)" % (args.output, len(args.metrics),
                                                 "" if len(args.metrics) == 1 else "s"))


if __name__ == "__main__":
    main()
