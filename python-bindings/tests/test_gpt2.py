"""GPT-2 through from_torch (examples/python/gpt2_model.py: GPT-2's names,
a fused qkv projection split in three, lm_head tied to wte) against PyTorch:
dp on 8 local ranks, Megatron's annotations on 4 and dp x megatron on 2x2,
forward and ten AdamW steps.

CI runs a reduced size (2 layers, 64 wide, 4 heads, an odd vocabulary of
1001, batch 8 x 16): the full GPT-2 small (12 layers, 768 wide, 12 heads,
vocabulary 50257, context 1024, batch 8 x 64) is too slow for a 2-core CI
machine, and runs with PARTITA_GPT2_FULL=1 (it is reported as skipped
otherwise, not passed). The import-time and memory test always runs at full
size."""

import copy
import os
import subprocess
import sys

import numpy as np
import pytest

import partita
from partita import Mesh

from conftest import relative_error

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "examples", "python"))
from gpt2_model import GPT2, GPT2Config, megatron  # noqa: E402

FULL = os.environ.get("PARTITA_GPT2_FULL") == "1"
SMALL = (GPT2Config(vocab=1001, context=64, layers=2, hidden=64, heads=4), 16)
SIZES = [pytest.param(SMALL, id="reduced"),
         pytest.param((GPT2Config(), 64), id="gpt2-small", marks=pytest.mark.skipif(
             not FULL, reason="full GPT-2 small: set PARTITA_GPT2_FULL=1"))]
# A collective's deadline: the full size on a loaded 2-core machine has
# ranks arriving more than the default minute apart.
TIMEOUT_MS = 1_800_000 if FULL else None
MESHES = [("dp", {"dp": 8}), ("megatron", {"tp": 4}),
          ("dp+megatron", {"dp": 2, "tp": 2})]


def batches(cfg, T, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [{"idx": torch.randint(0, cfg.vocab, (8, T), generator=g),
             "targets": torch.randint(0, cfg.vocab, (8, T), generator=g)}
            for _ in range(n)]


def imported(module, batch):
    return partita.from_torch(module, (batch["idx"], batch["targets"]),
                              output_names=("loss", "logits"))


def planned(m, kind, axes, **kw):
    mesh = Mesh(axes)
    if kind == "dp":
        return m.plan(mesh, strategy="dp", **kw)
    return megatron(m, mesh, dp=(kind == "dp+megatron")).plan(**kw)


# Tests that the tied weight is one parameter with both state_dict names,
# and that to_state_dict() gives every key of the module's state_dict (both
# names of the tied weight, the buffers) with the module's values.
def test_tied_weight_is_one_parameter_with_both_names():
    cfg, T = SMALL
    module = GPT2(cfg)
    m = imported(module, batches(cfg, T, 1)[0])
    names = [a.name for a in m.parameters]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names
    assert m.aliases == {"lm_head.weight": "transformer.wte.weight"}
    sd = m.to_state_dict()
    assert set(sd) == set(module.state_dict())
    assert sd["lm_head.weight"] is sd["transformer.wte.weight"]
    for k, t in module.state_dict().items():
        np.testing.assert_array_equal(sd[k], t.numpy(), err_msg=k)
    # Annotating under the other name annotates the one parameter.
    mesh = Mesh({"tp": 2})
    m.shard("lm_head.weight", partita.P(None, "tp"), mesh)
    assert m.sharding("transformer.wte.weight") is not None


# Tests logits and loss against PyTorch's for the three layouts; the odd
# vocabulary stays replicated, as explain shows.
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind,axes", MESHES)
def test_gpt2_forward_matches_pytorch(size, kind, axes):
    cfg, T = size
    module = GPT2(cfg)
    batch = batches(cfg, T, 1)[0]
    with torch.no_grad():
        loss, logits = module(**batch)
    m = imported(module, batch)
    plan = planned(m, kind, axes)
    assert plan.num_devices == (8 if kind == "dp" else 4)
    if kind != "dp":
        wte = [l for l in plan.explain().text.splitlines()
               if l.strip().startswith("transformer.wte.weight:")]
        assert wte and "[{}, {}]" in wte[0], wte
    out = plan.run(batch, params=m.state_dict(), timeout_ms=TIMEOUT_MS)
    assert relative_error(out["logits"], logits.numpy()) < 1e-4
    assert relative_error(out["loss"], loss.item()) < 1e-4


# Tests that dp moves ZeRO's 2 Psi per step, not more: the tied weight's
# two gradients (lm_head's, through its transposed read, and the
# embedding's) are added before one all_reduce. Before nn-absorb-transposes
# the head's gradient was reduced on its own, in the transposed order:
# 1.36 of 2 Psi at this size. (Slightly under 1: wpe's gradient covers the
# 16 positions a batch uses, of the 64 it holds.)
def test_gpt2_dp_moves_two_psi():
    cfg, T = SMALL
    module = GPT2(cfg)
    m = imported(module, batches(cfg, T, 1)[0])
    plan = planned(m, "dp", {"dp": 8}, train="adamw")
    line = [l for l in plan.explain().text.splitlines()
            if "2 Psi (N-1)/N" in l and "this plan moves" in l]
    assert len(line) == 1, line
    moved = float(line[0].split("this plan moves ")[1].split()[0])
    assert 0.95 <= moved <= 1.0, line[0]


def torch_adamw(module, data, dtype=None):
    """Ten AdamW steps of `module` (in place; cast to `dtype` first when
    given): the losses, and which elements the parameter check keeps (see
    below), from the first step's gradients."""
    if dtype is not None:
        module = module.to(dtype)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                  weight_decay=0.01)
    losses, compared = [], None
    for b in data:
        optimizer.zero_grad()
        loss, _ = module(**b)
        loss.backward()
        if compared is None:
            compared = {}
            for name, p in module.named_parameters():
                g = np.abs(p.grad.numpy())
                compared[name] = (g == 0) | (g >= 1e-6 * g.max())
        optimizer.step()
        losses.append(loss.item())
    return losses, compared


# Tests ten AdamW steps against torch.optim.AdamW: losses within 1e-4
# relative, and parameters within 1e-4 relative, except the key third of
# each fused qkv bias (its gradient is zero in exact arithmetic, so Adam
# follows rounding noise) and the few elements whose first gradient is
# rounding-noise sized (below).
#
# At the full size, fp32 itself does not reproduce parameters to 1e-4:
# PyTorch at 2 threads ends 1.15e-4 from PyTorch at 1 thread, and 5.2e-4
# from the same training in fp64 (bench/gpt2-precision/run.py; Adam's
# m / sqrt(v) turns the last bits of small gradients into lr-sized steps).
# There each parameter must be within 1e-4 of PyTorch's or, failing that,
# no further from the fp64 training than twice the furthest any PyTorch
# fp32 parameter lands from it: as close to exact arithmetic as PyTorch
# is, up to a factor 2. (Per tensor the two distances are two draws of
# rounding noise, whose ratio alone varies by about 2 either way.)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind,axes", MESHES)
def test_gpt2_trains_like_torch_adamw(size, kind, axes):
    cfg, T = size
    full = cfg != SMALL[0]
    module = GPT2(cfg)
    data = batches(cfg, T, 10, seed=2)
    m = imported(module, data[0])
    plan = planned(m, kind, axes, train="adamw", lr=1e-3, weight_decay=0.01)
    result = plan.train(data, params=m.state_dict(), timeout_ms=TIMEOUT_MS)
    trained = m.to_state_dict(result["parameters"])
    del plan, result["parameters"], m
    # The module's weights are still the initial ones (the plan trained
    # copies); kept for the fp64 training only after Partita's ranks are
    # gone, when memory is free again.
    initial = copy.deepcopy(module.state_dict()) if full else None
    losses, compared = torch_adamw(module, data)
    assert relative_error(result["losses"], losses) < 1e-4
    exact = None
    if full:
        exact = GPT2(cfg)
        exact.load_state_dict(initial)
        torch_adamw(exact, data, torch.float64)
        exact = {n: p.detach().numpy() for n, p in exact.named_parameters()}
    C = cfg.hidden
    left_out, beyond = 0, []
    for name, p in module.named_parameters():
        # An element whose first gradient is nonzero but below 1e-6 of its
        # tensor's largest moves by Adam's g / (|g| + eps): its first step
        # is lr times a ratio that the last bits of g decide. (One element
        # of c_fc.weight in the reduced model: gradient 4.9e-9 against
        # 8.1e-3, 1.27e-4 relative after 10 steps under dp+megatron.) Such
        # elements are left out, and counted.
        keep = compared[name]
        if not name.endswith("c_attn.bias"):
            left_out += keep.size - int(keep.sum())
        else:
            keep = keep.copy()
            keep[C:2 * C] = False
        got, want = trained[name][keep], p.detach().numpy()[keep]
        error = relative_error(got, want)
        if exact is not None:
            ours = relative_error(got, exact[name][keep])
            theirs = relative_error(want, exact[name][keep])
            beyond.append((ours, theirs, error, name))
        else:
            assert error < 1e-4, name
    if full:
        furthest = max(theirs for _, theirs, _, _ in beyond)
        missed = [b for b in beyond if b[2] >= 1e-4]
        worst = max(missed, default=(0.0, 0.0, 0.0, None))
        print(f"{kind}: {len(missed)} of {len(beyond)} parameters beyond "
              f"1e-4 of PyTorch's; furthest from fp64: Partita "
              f"{max(b[0] for b in beyond):.3g}, PyTorch fp32 "
              f"{furthest:.3g}; of those beyond, {worst[3]} at {worst[0]:.3g}")
        for ours, _, error, name in missed:
            assert ours <= 2 * furthest, (name, error, ours, furthest)
    # At most 0.1% of the elements (59 of 168,256 in the reduced model).
    total = sum(p.numel() for p in module.parameters())
    assert left_out <= total // 1000, (left_out, total)


IMPORT_SCRIPT = r"""
import resource, time, torch
import partita, partita.compiler
from gpt2_model import GPT2, GPT2Config
module = GPT2(GPT2Config())
idx = torch.randint(0, 50257, (8, 64))
weights = sum(p.numel() * p.element_size() for p in module.parameters())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start, cpu = time.perf_counter(), time.process_time()
m = partita.from_torch(module, (idx, idx), output_names=("loss", "logits"))
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert len(m.parameters) == 148
print(cpu, seconds, after - before, weights)
"""


# Tests that a traced GPT-2 small (124M parameters, batch 8 x 64) becomes IR
# in under 5 s and raises the peak RSS by at most one copy of its weights
# (the weights stay arguments; the trace computes nothing: fake tensors).
# In a fresh process, so that the peak is this import's. The 5 s bound is on
# the process's CPU time: the import is one thread of Python, and on a CI
# machine shared with other jobs its wall time measures the others too
# (3.0 s wall idle here, 5.6 s at a load of 27); the wall time gets a loose
# bound of three times that.
def test_gpt2_small_imports_fast_and_lean():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                      "python"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", IMPORT_SCRIPT], check=True,
                         capture_output=True, text=True, env=env).stdout
    cpu, seconds, grown, weights = (float(x) for x in out.split())
    assert cpu < 5.0, out
    assert seconds < 15.0, out
    assert grown <= weights, out
