"""How far apart fp32 trainings of GPT-2 small land after ten AdamW steps,
under python-bindings/tests/test_gpt2.py's metric (max |a - b| / max |b|
per parameter) and its filter (elements whose first gradient is nonzero but
below 1e-6 of their tensor's largest are left out; so is the key third of
c_attn.bias). Four trainings of the same module from the same initial
weights on the same ten batches (the test's): Partita under megatron on 4
local ranks, PyTorch fp32 at 1 and at 2 threads, PyTorch fp64 (the exact
trajectory, to fp32's eyes). Prints each pair's loss and parameter error.

  .venv/bin/python bench/gpt2-precision/run.py

Needs about 14 GB of memory and, on 2 cores, 20-25 minutes. Not a test:
it measures how much two correct fp32 implementations may differ, which
is what a parameter tolerance at this size has to allow.
"""
import copy
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python-bindings", "tests"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
from gpt2_model import GPT2, GPT2Config
import test_gpt2 as t
from conftest import relative_error
cfg, T = GPT2Config(), 64
module = GPT2(cfg)
init = copy.deepcopy(module.state_dict())
data = t.batches(cfg, T, 10, seed=2)

def torch_train(dtype, threads):
    torch.set_num_threads(threads)
    mod = GPT2(cfg)
    mod.load_state_dict(init)
    mod = mod.to(dtype)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-3, weight_decay=0.01)
    first, losses = None, []
    for b in data:
        opt.zero_grad()
        loss, _ = mod(**b)
        loss.backward()
        if first is None:
            first = {n: p.grad.detach().double().numpy().copy() for n, p in mod.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().double().numpy() for n, p in mod.named_parameters()}, first, losses

sides = {}
t0 = time.time()
m = t.imported(module, data[0])
plan = t.planned(m, "megatron", {"tp": 4}, train="adamw", lr=1e-3, weight_decay=0.01)
r = plan.train(data, params=m.state_dict(), timeout_ms=1_800_000)
sd = m.to_state_dict(r["parameters"])
sides["partita-megatron"] = ({n: np.asarray(sd[n], np.float64) for n, _ in module.named_parameters()}, np.array(r["losses"]))
print(f"partita megatron tp=4: {time.time() - t0:.0f} s", flush=True)
del plan, r, m
p, first32, l = torch_train(torch.float32, 1)
sides["torch32-1t"] = (p, np.array(l))
print(f"torch fp32, 1 thread: {time.time() - t0:.0f} s", flush=True)
p, _, l = torch_train(torch.float32, 2)
sides["torch32-2t"] = (p, np.array(l))
print(f"torch fp32, 2 threads: {time.time() - t0:.0f} s", flush=True)
p, _, l = torch_train(torch.float64, 1)
sides["torch64"] = (p, np.array(l))
print(f"torch fp64: {time.time() - t0:.0f} s", flush=True)
C = cfg.hidden
def compare(a, b):
    (pa, la), (pb, lb) = sides[a], sides[b]
    worst, worst_name, unfiltered = 0.0, "", 0.0
    for n in pa:
        g = np.abs(first32[n])
        keep = (g == 0) | (g >= 1e-6 * g.max())
        if n.endswith("c_attn.bias"):
            key = np.ones(keep.shape, bool)
            key[C:2 * C] = False
            keep &= key
        e = relative_error(pa[n][keep], pb[n][keep])
        unfiltered = max(unfiltered, relative_error(pa[n], pb[n]))
        if e > worst:
            worst, worst_name = e, n
    print(f"{a:18s} vs {b:12s}: losses {relative_error(la, lb):.2e}, params (test filter) {worst:.2e} at {worst_name}, unfiltered {unfiltered:.2e}", flush=True)
for a, b in [("partita-megatron", "torch32-1t"), ("torch32-2t", "torch32-1t"), ("torch64", "torch32-1t"),
             ("partita-megatron", "torch64"), ("torch32-1t", "torch64"), ("torch32-2t", "torch64")]:
    compare(a, b)
