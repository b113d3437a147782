"""Plans from Python: explain, run (numpy and torch in place), train."""

import numpy as np
import pytest

import partita
from partita import Mesh, P, runtime

from conftest import relative_error, token_batch


def test_explain_text_and_memory(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    report = plan.explain()
    assert 'mesh: "dp"=2 (2 devices)' in report.text
    assert "memory per device" in report.text
    mem = report.memory
    assert mem["total"] == (mem["parameters"] + mem["inputs"] + mem["constants"]
                            + mem["state"] + mem["arena_peak"]
                            + mem["host_arena"] + mem["buckets"]
                            + mem["scratch"])
    assert f"parameters   {mem['parameters']} B" in report.text
    assert "model_state" not in mem


def test_explain_train_step_has_model_state(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="zero2", train=True)
    state = plan.explain().memory["model_state"]
    assert state["total"] == (state["parameters"] + state["gradients"]
                              + state["optimizer"])
    assert "<- this plan" in plan.explain().text


# Tests that plan(precision=...) compiles the mixed recipe: explain's
# model state counts 2 + 2 + 12 bytes per parameter (the f32 master copy
# among the optimizer state), and a precision without train= is an error.
def test_plan_precision_bf16_mixed(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="zero2", train="adamw",
                          precision="bf16-mixed")
    text = plan.explain().text
    assert "2 + 2 + 12 bytes per parameter" in text
    assert "<- this plan" in text
    with pytest.raises(partita.Error, match="needs train="):
        small_gpt.plan(Mesh({"dp": 2}), strategy="dp", precision="bf16-mixed")
    with pytest.raises(partita.Error, match="unknown precision 'fp8'"):
        small_gpt.plan(Mesh({"dp": 2}), strategy="dp", train=True,
                       precision="fp8")


def test_run_returns_numpy_by_name(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    out = plan.run(token_batch(0))
    assert set(out) == {"loss", "logits"}
    assert isinstance(out["logits"], np.ndarray)
    assert out["logits"].shape == (4, 8, 32) and out["logits"].dtype == np.float32


# Tests that arrays whose dtype and layout match are read in place (the
# runtime reads from the caller's pointer), numpy and torch alike, and that
# others are converted rather than rejected.
def test_inputs_are_read_in_place(small_gpt):
    torch = pytest.importorskip("torch")
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    batch = token_batch(1)
    expected = plan.run(batch)["logits"]
    ids = torch.from_numpy(batch["ids"])
    labels = torch.from_numpy(batch["labels"])
    out = plan.run({"ids": ids, "labels": labels})
    assert runtime._last_input_addresses() == [ids.data_ptr(), labels.data_ptr()]
    np.testing.assert_array_equal(out["logits"], expected)
    plan.run(batch)
    assert runtime._last_input_addresses()[0] == batch["ids"].ctypes.data
    # int64 and non-contiguous inputs are converted (a copy, so not in place).
    wide = torch.from_numpy(batch["ids"]).long()
    out = plan.run({"ids": wide, "labels": batch["labels"].astype(np.int64)})
    np.testing.assert_array_equal(out["logits"], expected)
    assert runtime._last_input_addresses()[0] != wide.data_ptr()


def test_params_replace_initial_values(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    batch = token_batch(2)
    before = plan.run(batch)["logits"]
    shape = [p["shape"] for p in plan.parameters() if p["name"] == "lm_head"][0]
    out = plan.run(batch, params={"lm_head": np.zeros(shape, np.float32)})
    assert np.abs(out["logits"]).max() == 0 and np.abs(before).max() > 0


def test_run_errors(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    with pytest.raises(partita.Error, match="needs input 'labels'"):
        plan.run({"ids": token_batch(0)["ids"]})
    with pytest.raises(partita.Error, match="input 'ids' must be i32x4x8, got i32x4x9"):
        plan.run({"ids": np.zeros((4, 9), np.int32),
                  "labels": np.zeros((4, 8), np.int32)})
    with pytest.raises(partita.Error, match="2 devices, ranks=3"):
        plan.run(token_batch(0), ranks=3)
    with pytest.raises(partita.Error, match="no program 'backward'"):
        plan.run(token_batch(0), program="backward")
    with pytest.raises(partita.Error, match="no parameter 'nope'"):
        plan.run(token_batch(0), params={"nope": np.zeros(1, np.float32)})
    with pytest.raises(partita.Error, match="timeout_ms=50: .* at least 100 ms"):
        plan.run(token_batch(0), timeout_ms=50)


def test_plan_save_load(small_gpt, tmp_path):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp")
    plan.save(tmp_path / "p.pb")
    again = partita.Plan.load(tmp_path / "p.pb")
    np.testing.assert_array_equal(again.run(token_batch(3))["logits"],
                                  plan.run(token_batch(3))["logits"])
    with pytest.raises(partita.Error):
        partita.Plan(b"not a plan")


def test_compile_errors(small_gpt):
    with pytest.raises(partita.Error, match="unknown strategy 'ddp'"):
        small_gpt.plan(Mesh({"dp": 2}), strategy="ddp")
    with pytest.raises(partita.Error, match="no strategy given"):
        small_gpt.plan(Mesh({"dp": 2}))
    with pytest.raises(partita.Error, match="unknown train 'rmsprop'"):
        small_gpt.plan(Mesh({"dp": 2}), strategy="dp", train="rmsprop")
    with pytest.raises(partita.Error, match="strategy dp needs a mesh"):
        small_gpt.plan(strategy="dp")
    with pytest.raises(partita.Error, match="unknown stage 'lowered'"):
        small_gpt.compile(Mesh({"dp": 2}), strategy="dp", stage="lowered")
    with pytest.raises(partita.Error) as info:
        small_gpt.plan(Mesh({"x": 2}), strategy="dp")
    assert info.value.diagnostics and "dp" in str(info.value)


def test_compile_stage_shows_propagated_shardings(small_gpt):
    propagated = small_gpt.compile(Mesh({"dp": 2}), strategy="dp",
                                   stage="propagated")
    assert '#dist.sharding<@mesh, [{"dp"}' in str(propagated)
    assert "%layers.0.attn" in str(propagated)


# Tests training from Python: the callback sees each step's metrics, the
# loss goes down on a repeated batch, the trained parameters come back.
def test_train_with_callback(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp", train="adamw", lr=1e-2)
    seen = []
    batch = token_batch(4)
    out = plan.train([batch] * 6, callback=seen.append, timeout_ms=120000)
    assert [m["step"] for m in seen] == list(range(6))
    assert [m["loss"] for m in seen] == out["losses"]
    assert out["losses"][-1] < out["losses"][0]
    assert out["parameters"]["wte"].shape == (32, 16)
    assert len(out["seconds"]) == 6


def test_train_callback_exception_stops_training(small_gpt):
    plan = small_gpt.plan(Mesh({"dp": 2}), strategy="dp", train=True)

    def stop(metrics):
        if metrics["step"] == 1:
            raise KeyboardInterrupt("enough")

    with pytest.raises(KeyboardInterrupt, match="enough"):
        plan.train([token_batch(5)] * 4, callback=stop)
    with pytest.raises(partita.Error, match="3 steps need 3 batches, got 1"):
        plan.train([token_batch(5)], steps=3)


def test_user_annotations_compile_without_a_strategy(small_gpt):
    mesh = Mesh({"dp": 2})
    small_gpt.shard("ids", P("dp", None), mesh).shard("labels", P("dp", None), mesh)
    plan = small_gpt.plan()
    assert plan.num_devices == 2
    batch = token_batch(6)
    out = plan.run(batch)
    ref = plan.run(batch, program="reference")
    assert relative_error(out["logits"], ref["logits"]) < 1e-5


# Tests Model.search (`partita plan --strategy auto` from Python): every
# preset on every mesh of 4 devices, ranked by the estimate; a memory limit
# one byte under the winner's makes another win; plan_best compiles the
# winner, whose explained memory is the search's and whose forward matches
# the unpartitioned reference; bad arguments raise.
def test_search_ranks_and_plans_the_best(small_gpt):
    # Pipelines left out (schedules=[]): test_search_pipelines has them.
    result = small_gpt.search(4, train=True, schedules=[])
    assert len(result.candidates) == 15
    ranked = [c for c in result.candidates if c.rank > 0]
    assert [c.rank for c in ranked] == list(range(1, len(ranked) + 1))
    assert all(a.seconds <= b.seconds for a, b in zip(ranked, ranked[1:]))
    for c in ranked:
        assert c.mesh.size == 4
        assert c.seconds == pytest.approx(
            c.compute_seconds + c.comm_seconds - c.hidden_seconds)
    best = result.best
    assert best is ranked[0] and best.strategy in result.table

    plan = small_gpt.plan_best(result, train=True)
    assert plan.explain().memory["total"] == best.memory_bytes

    limited = small_gpt.search(4, train=True, schedules=[],
                               memory_per_device=best.memory_bytes - 1)
    assert limited.best is not None
    assert limited.best.strategy != best.strategy or \
        limited.best.mesh.axes != best.mesh.axes
    assert limited.best.memory_bytes < best.memory_bytes

    forward = small_gpt.search(2, strategies=["dp", "megatron"])
    fplan = small_gpt.plan_best(forward)
    batch = token_batch(3)
    out = fplan.run(batch)
    ref = fplan.run(batch, program="reference")
    assert relative_error(out["logits"], ref["logits"]) < 1e-5

    # Under every candidate with one microbatch, more microbatches fit.
    smallest = min(c.memory_bytes for c in result.candidates
                   if not c.rejection)
    accumulated = small_gpt.search(4, train=True, schedules=[],
                                   memory_per_device=smallest - 1)
    assert accumulated.best is not None and accumulated.best.microbatches > 1
    aplan = small_gpt.plan_best(accumulated, train=True)
    assert aplan.explain().memory["total"] == accumulated.best.memory_bytes

    nothing = small_gpt.search(4, train=True, memory_per_device=1)
    assert nothing.best is None
    with pytest.raises(partita.Error, match="no candidate of the search fits"):
        small_gpt.plan_best(nothing, train=True)
    with pytest.raises(partita.Error, match="devices must be from 2 to 4096"):
        small_gpt.search(1)
    with pytest.raises(partita.Error, match="unknown strategy 'zero4'"):
        small_gpt.search(4, strategies=["zero4"])


def test_search_pipelines(small_gpt):
    # 2 layers on 4 devices: pp=2 before dp=2, and pp=4 alone, under 1f1b,
    # zb-h1 and interleaved (2 stages a rank); 4 or more stages of 2 layers
    # only cut by cost.
    result = small_gpt.search(4, train=True, strategies=["dp", "pp"],
                              device_tflops=0.01)
    piped = [c for c in result.candidates if c.pipeline_stages > 1]
    assert sorted((c.mesh.axes[0], c.schedule) for c in piped) == [
        (("pp", 2), "1f1b"), (("pp", 2), "interleaved"), (("pp", 2), "zb-h1"),
        (("pp", 4), "1f1b"), (("pp", 4), "interleaved"), (("pp", 4), "zb-h1")]
    assert all(c.stages_by == "cost" for c in piped
               if c.pipeline_stages * (2 if c.schedule == "interleaved" else 1)
               > 2)
    for c in piped:
        if c.rejection:
            continue
        assert c.microbatches in (2, 4) and c.hidden_seconds == 0
        assert c.stages_by in ("layers", "cost")
        assert c.bubble_seconds >= 0
        assert c.seconds == pytest.approx(
            c.compute_seconds + c.comm_seconds + c.bubble_seconds)
        assert c.schedule in result.table
    unpiped = [c for c in result.candidates if c.pipeline_stages == 1]
    assert all(c.schedule == "" and c.stages_by == "" and
               c.bubble_seconds == 0 for c in unpiped)

    # Only pipelines: the best is one, and plan_best compiles it as such.
    only = small_gpt.search(2, train=True, strategies=["pp"],
                            schedules=["zb-h1"])
    best = only.best
    assert best.pipeline_stages == 2 and best.schedule == "zb-h1"
    plan = small_gpt.plan_best(only, train=True)
    text = plan.explain().text
    assert ("pipeline: 2 stages along \"pp\", %d microbatches per step, "
            "schedule 'zb-h1'" % best.microbatches) in text
    # explain reports stage 0; the candidate's memory is its largest stage's.
    assert plan.explain().memory["total"] <= best.memory_bytes

    with pytest.raises(partita.Error, match="unknown schedule 'gpipe'"):
        small_gpt.search(4, train=True, schedules=["gpipe"])
    # Model.plan takes interleaved too (2 stages a rank, as searched).
    iplan = small_gpt.plan(strategy="none", train=True, pp=2, microbatches=2,
                           schedule="interleaved", stages_by="cost")
    assert "(2 ranks x 2 chunks)" in iplan.explain().text
    with pytest.raises(partita.Error, match="unknown stages_by 'weight'"):
        small_gpt.plan(strategy="none", train=True, pp=2, stages_by="weight")
    with pytest.raises(partita.Error, match="pp must be at least 0"):
        small_gpt.plan(strategy="dp", mesh=partita.Mesh({"dp": 2}), pp=2)


def test_search_with_ilp_and_plan_best(small_gpt):
    # ilp joins the search only when named: one program per mesh of 1 or 2
    # axes; plan_best compiles an ilp winner with the search's cost model.
    result = small_gpt.search(4, train=True, strategies=["dp", "ilp"],
                              schedules=[], device_tflops=0.001)
    ilp = [c for c in result.candidates if c.strategy == "ilp"]
    assert sorted(list(c.mesh.axes) for c in ilp) == [
        [("dp", 2), ("tp", 2)], [("dp", 4)]]
    assert all(not c.rejection for c in ilp)
    assert result.cost["device_tflops"] == 0.001
    assert "ilp" in result.table
    plan = small_gpt.plan_best(result, train=True)
    assert plan.num_devices == 4
    default = small_gpt.search(4, train=True, schedules=[])
    assert all(c.strategy != "ilp" for c in default.candidates)


def test_search_prices_kernel_bytes_at_memory_gbytes(small_gpt):
    # Every kernel's bytes at memory_gbytes, its FLOPs at device_tflops:
    # with FLOPs free, compute is the bytes alone, so it scales as 1 / rate.
    fast = small_gpt.search(2, train=True, strategies=["dp"], schedules=[],
                            device_tflops=1e9, memory_gbytes=1000.0)
    slow = small_gpt.search(2, train=True, strategies=["dp"], schedules=[],
                            device_tflops=1e9, memory_gbytes=1.0)
    assert fast.best.compute_seconds > 0
    assert slow.best.compute_seconds == pytest.approx(
        1000 * fast.best.compute_seconds, rel=1e-3)
    assert slow.cost["memory_gbytes"] == 1.0
    with pytest.raises(partita.Error, match="rates above 0"):
        small_gpt.search(2, train=True, strategies=["dp"], schedules=[],
                         memory_gbytes=0.0)
