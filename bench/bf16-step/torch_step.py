"""PyTorch's CPU bf16 autocast train step against its fp32 step, on the GPT
of `partita model gpt` (bench/train-vs-ddp's GPT module: Partita's layouts,
tanh GELU, causal attention, untied lm_head), one process, AdamW.

fp32: forward, backward and AdamW in float32. bf16: the forward under
torch.autocast("cpu", dtype=torch.bfloat16) (matmuls and einsums in bf16,
parameters kept f32, as Partita's bf16-mixed keeps f32 masters), backward
and AdamW as fp32. The two alternate round by round; each round times STEPS
steps after one warm-up step.

  python3 torch_step.py --threads T --steps K --rounds R --batch B --seq S \
      --hidden H --heads n --layers L --vocab V
"""
import argparse
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "train-vs-ddp"))
import fair  # noqa: E402
from torch_ddp import GPT  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    for name, default in (("threads", 1), ("steps", 5), ("rounds", 3),
                          ("batch", 8), ("seq", 256), ("hidden", 512),
                          ("heads", 8), ("layers", 4), ("vocab", 1024)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    fair.setup_torch(torch, a.threads)
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.hidden, a.heads, a.layers, 4 * a.hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    labels = torch.randint(0, a.vocab, (a.batch, a.seq))

    def step(bf16):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(ids, labels)
        loss.backward()
        opt.step()
        return loss.item()

    times = {False: [], True: []}
    for r in range(a.rounds):
        for bf16 in ((False, True) if r % 2 == 0 else (True, False)):
            step(bf16)  # warm-up
            for _ in range(a.steps):
                t = time.perf_counter()
                step(bf16)
                times[bf16].append(time.perf_counter() - t)
    f, b = statistics.median(times[False]), statistics.median(times[True])
    print("torch fp32 step median %.1f ms (%d steps)" % (f * 1e3, len(times[False])))
    print("torch bf16 autocast step median %.1f ms (%d steps)" % (b * 1e3, len(times[True])))
    print("torch bf16 autocast / fp32 step: %.3f" % (b / f))


if __name__ == "__main__":
    main()
