"""Shared fixtures of the Python package's tests (run by ctest against the
build tree's package: PYTHONPATH=<build>/python-bindings)."""

import os

# The JAX tests place arrays on a mesh of CPU devices: XLA makes them when
# asked before its first use (nothing else in the tests uses XLA).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import partita  # noqa: E402


@pytest.fixture
def small_gpt():
    """A GPT small enough to compile and run in milliseconds."""
    return partita.model("gpt", layers=2, hidden=16, heads=2, seq=8, vocab=32,
                         batch=4)


def token_batch(seed, batch=4, seq=8, vocab=32):
    """ids and labels for the small GPT, as numpy int32 arrays."""
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, vocab, (batch, seq)).astype(np.int32),
            "labels": rng.integers(0, vocab, (batch, seq)).astype(np.int32)}


def relative_error(a, b):
    """max |a - b| / max |b|."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
