"""Differential tests from Python: a built-in model planned for several
meshes and strategies, run on local ranks, matches the one-rank run (a plan
compiled for a mesh of one device), forward and training."""

import numpy as np
import pytest

import partita
from partita import Mesh

from conftest import relative_error, token_batch

CASES = [("dp", {"dp": 2}), ("dp", {"dp": 4}), ("megatron", {"tp": 2}),
         ("dp+megatron", {"dp": 2, "tp": 2})]


def gpt():
    return partita.model("gpt", layers=2, hidden=32, heads=4, seq=8, vocab=64,
                         batch=8)


def batch(seed):
    return token_batch(seed, batch=8, seq=8, vocab=64)


@pytest.fixture(scope="module")
def one_rank():
    """The forward plan and the train plan on one device."""
    return (gpt().plan(Mesh({"dp": 1}), strategy="dp"),
            gpt().plan(Mesh({"dp": 1}), strategy="dp", train="adamw", lr=1e-2))


# Tests that the partitioned forward matches the one-rank run.
@pytest.mark.parametrize("strategy,axes", CASES)
def test_forward_matches_one_rank(one_rank, strategy, axes):
    mesh = Mesh(axes)
    plan = gpt().plan(mesh, strategy=strategy)
    assert plan.num_devices == mesh.size
    inputs = batch(10)
    out = plan.run(inputs, ranks=mesh.size)
    ref = one_rank[0].run(inputs)
    assert relative_error(out["logits"], ref["logits"]) < 1e-5
    assert relative_error(out["loss"], ref["loss"]) < 1e-5


# Tests that three partitioned training steps give the one-rank losses and
# parameters (parameters at 1e-3, as `partita run --check --param-rtol`
# in the README: Adam's update divides noise-sized gradients, such as a key
# bias's, by their own magnitude).
@pytest.mark.parametrize("strategy,axes", CASES)
def test_training_matches_one_rank(one_rank, strategy, axes):
    mesh = Mesh(axes)
    plan = gpt().plan(mesh, strategy=strategy, train="adamw", lr=1e-2)
    batches = [batch(20 + i) for i in range(3)]
    out = plan.train(batches)
    ref = one_rank[1].train(batches)
    np.testing.assert_allclose(out["losses"], ref["losses"], rtol=1e-4)
    assert set(out["parameters"]) == set(ref["parameters"])
    for name, value in ref["parameters"].items():
        assert relative_error(out["parameters"][name], value) < 1e-3, name


# Tests that a plan whose every op's sharding the integer program chose
# (strategy="ilp": `partita plan --strategy ilp`) matches the one-rank run,
# forward and training. The devices are slow (10 GFLOP/s), so that splitting
# the compute is worth collectives and the plan is sharded.
def test_ilp_matches_one_rank(one_rank):
    mesh = Mesh({"dp": 2, "tp": 2})
    forward = gpt().plan(mesh, strategy="ilp", device_tflops=0.01)
    inputs = batch(10)
    out = forward.run(inputs, ranks=mesh.size)
    assert relative_error(out["logits"], one_rank[0].run(inputs)["logits"]) < 1e-5

    plan = gpt().plan(mesh, strategy="ilp", train="adamw", lr=1e-2,
                      device_tflops=0.01)
    # It is partitioned: the program reduces something across devices.
    assert "all_reduce over" in plan.explain().text
    batches = [batch(20 + i) for i in range(3)]
    out = plan.train(batches)
    ref = one_rank[1].train(batches)
    np.testing.assert_allclose(out["losses"], ref["losses"], rtol=1e-4)
    for name, value in ref["parameters"].items():
        assert relative_error(out["parameters"][name], value) < 1e-3, name


def test_ilp_solvers(one_rank):
    # The one-axis solver's plan on a 2-D mesh trains like one rank too.
    mesh = Mesh({"dp": 2, "tp": 2})
    plan = gpt().plan(mesh, strategy="ilp", train="adamw", lr=1e-2,
                      device_tflops=0.01, ilp_solver="one-axis")
    batches = [batch(30 + i) for i in range(2)]
    out = plan.train(batches)
    ref = one_rank[1].train(batches)
    np.testing.assert_allclose(out["losses"], ref["losses"], rtol=1e-4)
    with pytest.raises(partita.Error, match="solver must be cbc, greedy or "
                                            "one-axis, got 'glpk'"):
        gpt().plan(mesh, strategy="ilp", ilp_solver="glpk")


def test_ilp_cost_options_need_ilp():
    with pytest.raises(partita.Error, match="device_tflops only price "
                                            "strategy='ilp', not 'dp'"):
        gpt().plan(Mesh({"dp": 2}), strategy="dp", device_tflops=1.0)
    with pytest.raises(partita.Error, match="strategy ilp does not take pp"):
        gpt().plan(Mesh({"dp": 2}), strategy="ilp", train="adamw", pp=2)
