"""partita.from_torch: a PyTorch module traced (make_fx over a functional
call) into nn IR, checked against PyTorch's own outputs."""

import inspect

import numpy as np
import pytest

import partita
from partita import Mesh, P

from conftest import relative_error

torch = pytest.importorskip("torch")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = x + torch.relu(self.fc2(h)) * 0.5
        return torch.tanh(self.head(h))


class Block(torch.nn.Module):
    """A GPT-2 block written as usual (B, T, C = x.shape; a causal mask
    buffer; q @ k.transpose; masked_fill; softmax)."""

    def __init__(self, C, nh, T):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.q = torch.nn.Linear(C, C)
        self.k = torch.nn.Linear(C, C)
        self.v = torch.nn.Linear(C, C)
        self.proj = torch.nn.Linear(C, C)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.fc_proj = torch.nn.Linear(4 * C, C)
        self.nh = nh
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln_1(x)
        q = self.q(h).view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = self.k(h).view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = self.v(h).view(B, T, self.nh, C // self.nh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = torch.nn.functional.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        h = torch.nn.functional.gelu(self.fc(self.ln_2(x)), approximate="tanh")
        return x + self.fc_proj(h)


class GPT(torch.nn.Module):
    def __init__(self, V=64, C=32, nh=4, T=8, L=2):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList([Block(C, nh, T) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(C)
        self.lm_head = torch.nn.Linear(C, V, bias=False)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class GPTWithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt = GPT()

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1))
        return loss, logits


class WithFFT(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        return torch.fft.fft(y).real


def test_mlp_parameters_are_named_by_state_dict_keys():
    module = MLP()
    m = partita.from_torch(module, (torch.randn(4, 8),))
    assert [a.name for a in m.parameters] == list(module.state_dict())
    assert [a.name for a in m.inputs] == ["x"]
    assert set(m.state_dict()) == set(module.state_dict())
    np.testing.assert_array_equal(m.state_dict()["fc1.weight"],
                                  module.fc1.weight.detach().numpy())


# Tests that the imported MLP, planned for one and two ranks, gives
# PyTorch's outputs (with PyTorch's weights passed as params).
@pytest.mark.parametrize("axes,strategy", [({"dp": 1}, "dp"), ({"dp": 2}, "dp")])
def test_mlp_matches_pytorch(axes, strategy):
    torch.manual_seed(0)
    module = MLP()
    x = torch.randn(8, 8)
    m = partita.from_torch(module, (x,))
    plan = m.plan(Mesh(axes), strategy=strategy)
    out = plan.run({"x": x}, params=m.state_dict())
    expected = module(x).detach().numpy()
    assert relative_error(out["output0"], expected) < 1e-5


# Tests that a small GPT written in ordinary PyTorch imports (its mask buffer
# folded into a constant, int64 ids as i32) and gives PyTorch's logits under
# data parallelism, and under tensor parallelism annotated with PyTorch's
# parameter names (Megatron's MLP split: fc by rows, fc_proj by columns).
def test_small_gpt_matches_pytorch():
    torch.manual_seed(0)
    module = GPT()
    idx = torch.randint(0, 64, (4, 8))
    m = partita.from_torch(module, (idx,))
    assert [a.name for a in m.parameters] == [n for n, _ in module.named_parameters()]
    expected = module(idx).detach().numpy()
    out = m.plan(Mesh({"dp": 2}), strategy="dp").run({"idx": idx},
                                                      params=m.state_dict())
    assert relative_error(out["output0"], expected) < 1e-5
    mesh = Mesh({"dp": 2, "tp": 2})
    m.shard("idx", P("dp", None), mesh)
    m.shard("h.*.fc.weight", P("tp", None), mesh)
    m.shard("h.*.fc.bias", P("tp"), mesh)
    m.shard("h.*.fc_proj.weight", P(None, "tp"), mesh)
    plan = m.plan()
    assert 'h.0.fc.weight: [128x32] f32, [{"tp"}, {}]' in plan.explain().text
    out = plan.run({"idx": idx}, params=m.state_dict())
    assert relative_error(out["output0"], expected) < 1e-5


# Tests training an imported GPT: its cross-entropy loss (log_softmax +
# nll_loss) becomes nn.cross_entropy, and ten AdamW steps on two ranks track
# torch.optim.AdamW: losses within 1e-4 relative, parameters within 1e-4
# relative -- except the attention's key biases, whose gradient is zero in
# exact arithmetic (softmax does not change when every key score moves by the
# same amount), so that Adam's update follows rounding noise in both.
def test_small_gpt_trains_like_torch_adamw():
    torch.manual_seed(0)
    module = GPTWithLoss()
    g = torch.Generator().manual_seed(1)
    batches = [{"idx": torch.randint(0, 64, (4, 8), generator=g),
                "targets": torch.randint(0, 64, (4, 8), generator=g)}
               for _ in range(10)]
    m = partita.from_torch(module, (batches[0]["idx"], batches[0]["targets"]),
                           output_names=("loss", "logits"))
    out = m.plan(Mesh({"dp": 1}), strategy="dp").run(batches[0],
                                                     params=m.state_dict())
    assert relative_error(out["loss"], module(**batches[0])[0].item()) < 1e-5

    plan = m.plan(Mesh({"dp": 2}), strategy="dp", train="adamw", lr=1e-2,
                  weight_decay=0.01)
    result = plan.train(batches, params=m.state_dict())
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2,
                                  weight_decay=0.01)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss, _ = module(**batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert relative_error(result["losses"], losses) < 1e-4
    for name, p in module.named_parameters():
        if name.endswith(".k.bias"):
            continue
        assert relative_error(result["parameters"][name], p.detach()) < 1e-4, name


# Tests that an op without a mapping fails at import, naming the ATen op and
# the line of the model's source that called it.
def test_unsupported_op_names_op_and_source_line():
    lines, first = inspect.getsourcelines(WithFFT.forward)
    line = first + next(i for i, text in enumerate(lines) if "torch.fft.fft" in text)
    with pytest.raises(partita.Error) as info:
        partita.from_torch(WithFFT(), (torch.randn(4, 8),))
    msg = str(info.value)
    assert "unsupported ATen op aten._fft" in msg, msg
    assert f"test_from_torch.py:{line}:" in msg and "torch.fft.fft(y)" in msg, msg
