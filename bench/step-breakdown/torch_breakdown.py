"""Per-kind shares of PyTorch's GPT train step, from torch.profiler.

The model is train-vs-ddp's GPT (Partita's layouts, tanh GELU, untied head,
AdamW), one process, float32. Each timed step (zero_grad, forward,
backward, optimizer.step) runs under torch.profiler; every op's self CPU
time goes to one kind: "gemm" (mm/addmm/bmm/baddbmm: the BLAS calls),
"adamw" (everything under the optimizer step), or the kind of the op's
name (softmax, layer_norm, gelu, cross_entropy, embedding, elementwise,
copy/layout, other). Prints one line per kind and a "step" line:
  kind NAME MS_PER_STEP
  step MS_PER_STEP (unprofiled median) MS_PER_STEP (profiled sum)

  python3 torch_breakdown.py --threads T --steps N --warmup W --batch B \
      --seq S --hidden H --heads n --layers L --vocab V [--shapes]

--shapes also prints one line per GEMM op and operand shapes, with its
time per step and rate (the peer of `partita run --profile-einsums`):
  gemm NAME SHAPES CALLS_PER_STEP MS_PER_STEP GFLOP/S
"""
import argparse
import collections
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "train-vs-ddp"))
import fair  # noqa: E402
import lockstep  # noqa: E402
from torch_ddp import GPT  # noqa: E402

GEMM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::dot",
        "aten::mv", "aten::addmv")
KINDS = [("cross_entropy", ("log_softmax", "nll_loss", "cross_entropy")),
         ("softmax", ("softmax",)),
         ("layer_norm", ("layer_norm",)),
         ("gelu", ("gelu",)),
         ("embedding", ("embedding", "index")),
         ("copy/layout", ("copy_", "clone", "contiguous", "_reshape_alias",
                          "as_strided", "cat", "_unsafe_view", "empty")),
         ("elementwise", ("add", "mul", "div", "sub", "masked_fill", "fill_",
                          "zero_", "sum", "neg", "where", "tanh", "pow",
                          "sqrt"))]


def kind_of(name, under_optimizer):
    if under_optimizer:
        return "adamw"
    if name in GEMM:
        return "gemm"
    for kind, keys in KINDS:
        if any(k in name for k in keys):
            return kind
    return "other"


def gemm_flops(name, shapes):
    """2 per multiply-add of one mm / addmm / bmm / baddbmm call (0 for
    the vector products)."""
    if name in ("aten::addmm", "aten::baddbmm"):
        shapes = shapes[1:3]  # the added input first
    if name in ("aten::mm", "aten::addmm") and len(shapes) == 2:
        (m, k), (_, n) = shapes
        return 2.0 * m * k * n
    if name in ("aten::bmm", "aten::baddbmm") and len(shapes) == 2:
        (b, m, k), (_, _, n) = shapes
        return 2.0 * b * m * k * n
    return 0.0


def main():
    p = argparse.ArgumentParser()
    for name, default in [("threads", 1), ("steps", 5), ("warmup", 2),
                          ("batch", 8), ("seq", 128), ("hidden", 256),
                          ("heads", 4), ("layers", 4), ("vocab", 1024),
                          ("ffn", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--step-gate", metavar="IN,OUT",
                   help="take every step (warm-up, timed, profiled) in "
                   "turns with another program (bench/common/lockstep.py)")
    a = p.parse_args()
    gate = lockstep.Gate.from_option(p, a.step_gate)
    fair.setup_torch(torch, a.threads)
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.hidden, a.heads, a.layers,
                a.ffn or 4 * a.hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    labels = torch.randint(0, a.vocab, (a.batch, a.seq))

    def step():
        opt.zero_grad(set_to_none=True)
        model(ids, labels).backward()
        opt.step()

    def turn():
        if gate:
            gate.turn()

    def done():
        if gate:
            gate.done()

    for _ in range(a.warmup):
        turn()
        step()
        done()
    plain = []
    for _ in range(a.steps):
        turn()
        t0 = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t0)
        done()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU],
                 record_shapes=a.shapes) as prof:
        for _ in range(a.steps):
            turn()  # the wait runs no op: the profile does not count it
            step()
            done()
    shares = collections.Counter()
    gemms = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for ev in prof.events():
        if a.shapes and ev.name in GEMM:
            shapes = [s for s in ev.input_shapes if s]
            g = gemms[(ev.name, str(shapes))]
            g[0] += 1
            g[1] += ev.self_cpu_time_total
            g[2] += gemm_flops(ev.name, shapes)
        e, under = ev, False
        while e is not None:
            if e.name.startswith("Optimizer.step") or \
                    e.name.startswith("Optimizer.zero_grad"):
                under = True
            e = e.cpu_parent
        shares[kind_of(ev.name, under)] += ev.self_cpu_time_total  # us
    for kind, us in shares.most_common():
        print(f"kind {kind} {us / 1e3 / a.steps:.3f}")
    for (name, shapes), (calls, us, flops) in sorted(
            gemms.items(), key=lambda kv: -kv[1][1]):
        print(f"gemm {name} {shapes.replace(' ', '')} {calls / a.steps:.1f} "
              f"{us / 1e3 / a.steps:.3f} "
              f"{flops / (us * 1e-6) * 1e-9 if us else 0:.1f}")
    print(f"step {statistics.median(plain) * 1e3:.3f} "
          f"{sum(shares.values()) / 1e3 / a.steps:.3f}")


if __name__ == "__main__":
    main()
