"""partita.from_torch: a PyTorch module traced (make_fx over a functional
call) into nn IR, checked against PyTorch's own outputs."""

import inspect

import numpy as np
import pytest

import partita
from partita import Mesh

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
