# GPT-2 from PyTorch through Partita, in cells (`# %%`: VS Code, Jupytext):
# trace, annotate, plan, explain, train a few steps, compare with PyTorch.
#
#   .venv/bin/python examples/python/gpt2_walkthrough.py            # GPT-2 small
#   .venv/bin/python examples/python/gpt2_walkthrough.py --small    # CI's size
#
# (with PYTHONPATH=build/python-bindings when the package is not installed).

# %% The model: GPT-2 as PyTorch code writes it (gpt2_model.py beside this
# file), seeded random weights, lm_head tied to wte.
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import partita  # noqa: E402
from partita import Mesh  # noqa: E402
from gpt2_model import GPT2, GPT2Config, megatron  # noqa: E402

small = "--small" in sys.argv
cfg = (GPT2Config(vocab=1001, context=64, layers=2, hidden=64, heads=4)
       if small else GPT2Config())
T = 16 if small else 64
module = GPT2(cfg, seed=0)
g = torch.Generator().manual_seed(0)
batches = [{"idx": torch.randint(0, cfg.vocab, (8, T), generator=g),
            "targets": torch.randint(0, cfg.vocab, (8, T), generator=g)}
           for _ in range(3)]

# %% Trace: make_fx over fake tensors gives an ATen graph, written as nn IR.
# Parameters keep their state_dict names; the tied weight is one parameter.
start = time.perf_counter()
m = partita.from_torch(module, (batches[0]["idx"], batches[0]["targets"]),
                       output_names=("loss", "logits"))
print(f"traced in {time.perf_counter() - start:.1f} s: "
      f"{len(m.parameters)} parameters, inputs {[a.name for a in m.inputs]}")
print("tied:", m.aliases)

# %% Annotate: Megatron's tensor parallelism on GPT-2's names over tp=2, the
# batch over dp=2 (JAX-style specs; DTensor placements work as well).
mesh = Mesh({"dp": 2, "tp": 2})
megatron(m, mesh, dp=True)
print(m.sharding("transformer.h.0.mlp.c_fc.weight"))

# %% Plan a training step (AdamW) and explain it: layouts per parameter,
# collectives, memory per device. The odd vocabulary stays replicated.
plan = m.plan(train="adamw", lr=1e-3, weight_decay=0.01)
report = plan.explain()
print("\n".join(report.text.splitlines()[:25]))
print("memory per device:", report.memory["total"], "bytes")

# %% Train a few steps on 4 local ranks, printing each step's loss.
result = plan.train(batches, params=m.state_dict(),
                    callback=lambda s: print(f"step {s['step']}: "
                                             f"loss {s['loss']:.5f}"))

# %% Compare with PyTorch: the same steps with torch.optim.AdamW.
optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.01)
losses = []
for b in batches:
    optimizer.zero_grad()
    loss, _ = module(**b)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
worst = max(abs(a - b) / abs(b) for a, b in zip(result["losses"], losses))
print("partita:", [f"{x:.5f}" for x in result["losses"]])
print("pytorch:", [f"{x:.5f}" for x in losses])
print(f"largest relative loss difference: {worst:.2e}")
trained = m.to_state_dict(result["parameters"])
assert worst < 1e-4, worst
module.load_state_dict({k: torch.from_numpy(np.asarray(v))
                        for k, v in trained.items()})
print("trained weights loaded back into the PyTorch module")
