"""partita.from_jax: a plain jax.numpy function traced to a jaxpr and written
as nn IR, checked against JAX's own outputs and a hand-written AdamW."""

import inspect

import numpy as np
import pytest

import partita
from partita import Mesh, P

from conftest import relative_error

jax = pytest.importorskip("jax")
jnp = jax.numpy


def init_gpt(seed, V=64, C=32, nh=4, T=8, L=2):
    """A GPT-2-style parameter pytree (Flax-free: nested dicts and lists)."""
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 16 * L + 8))

    def normal(*shape):
        return 0.02 * jax.random.normal(next(keys), shape, jnp.float32)

    def ln():
        return {"g": 1.0 + normal(C), "b": normal(C)}

    return {"wte": normal(V, C), "wpe": normal(T, C), "ln_f": ln(),
            "h": [{"ln_1": ln(), "ln_2": ln(),
                   "attn": {"w": normal(C, 3 * C), "b": normal(3 * C),
                            "wo": normal(C, C), "bo": normal(C)},
                   "mlp": {"w1": normal(C, 4 * C), "b1": normal(4 * C),
                           "w2": normal(4 * C, C), "b2": normal(C)}}
                  for _ in range(L)]}


def layer_norm(x, p, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * p["g"] + p["b"]


def attention(x, p, nh):
    B, T, C = x.shape
    q, k, v = jnp.split(x @ p["w"] + p["b"], 3, axis=-1)  # fused qkv
    q, k, v = (t.reshape(B, T, nh, C // nh).transpose(0, 2, 1, 3)
               for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // nh)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    y = jax.nn.softmax(s, axis=-1) @ v
    return y.transpose(0, 2, 1, 3).reshape(B, T, C) @ p["wo"] + p["bo"]


def gpt(params, ids, labels, nh=4):
    """Loss and logits; the output embedding is tied to wte."""
    B, T = ids.shape
    x = params["wte"][ids] + params["wpe"][jnp.arange(T)]
    for blk in params["h"]:
        x = x + attention(layer_norm(x, blk["ln_1"]), blk["attn"], nh)
        h = layer_norm(x, blk["ln_2"]) @ blk["mlp"]["w1"] + blk["mlp"]["b1"]
        x = x + jax.nn.gelu(h, approximate=True) @ blk["mlp"]["w2"] + blk["mlp"]["b2"]
    logits = layer_norm(x, params["ln_f"]) @ params["wte"].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss = -jnp.take_along_axis(logp, labels[..., None], axis=-1).mean()
    return loss, logits


def batch(seed, B=4, T=8, V=64):
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, V, (B, T)).astype(np.int32),
            "labels": rng.integers(0, V, (B, T)).astype(np.int32)}


def import_gpt(params, b):
    return partita.from_jax(gpt, params, b["ids"], b["labels"],
                            output_names=("loss", "logits"))


def test_parameters_are_named_by_pytree_paths():
    params = init_gpt(0)
    b = batch(0)
    m = import_gpt(params, b)
    names = [a.name for a in m.parameters]
    assert "h.1.attn.w" in names and "ln_f.g" in names and "wte" in names
    assert len(names) == len(jax.tree_util.tree_leaves(params))
    assert [a.name for a in m.inputs] == ["ids", "labels"]
    np.testing.assert_array_equal(m.state_dict()["h.0.mlp.w1"],
                                  np.asarray(params["h"][0]["mlp"]["w1"]))
    text = str(m)
    # Recognized as a whole: softmax, the mean cross-entropy, the embedding.
    assert "nn.softmax" in text and "nn.cross_entropy" in text
    assert "nn.embedding" in text


# Tests that the imported GPT gives JAX's loss and logits on one rank, under
# data parallelism on 2 and 4, and with tensor parallelism annotated on the
# pytree names (the MLP split Megatron's way) on a 2x2 mesh.
@pytest.mark.parametrize("case", ["dp1", "dp2", "dp4", "dp+tp"])
def test_gpt_matches_jax(case):
    params = init_gpt(1)
    b = batch(1)
    loss, logits = gpt(params, b["ids"], b["labels"])
    m = import_gpt(params, b)
    if case == "dp+tp":
        mesh = Mesh({"dp": 2, "tp": 2})
        m.shard("ids", P("dp", None), mesh).shard("labels", P("dp", None), mesh)
        m.shard("h.*.mlp.w1", P(None, "tp"), mesh)
        m.shard("h.*.mlp.b1", P("tp"), mesh)
        m.shard("h.*.mlp.w2", P("tp", None), mesh)
        plan = m.plan()
    else:
        n = int(case[2:])
        plan = m.plan(Mesh({"dp": n}), strategy="dp")
    out = plan.run(b, params=m.state_dict())
    assert relative_error(out["logits"], logits) < 1e-4
    assert relative_error(out["loss"], loss) < 1e-4


def adamw(params, grads, state, step, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    """AdamW as torch.optim.AdamW writes it (decoupled decay first)."""
    m, v = state
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step

    def update(p, m, v):
        p = p * (1 - lr * wd)
        return p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)

    return jax.tree_util.tree_map(update, params, m, v), (m, v)


# Tests ten AdamW steps of the imported GPT on two ranks against a
# hand-written AdamW over jax.grad: losses within 1e-4 relative, every
# parameter within 1e-4 relative -- except the key third of the fused qkv
# bias, whose gradient is zero in exact arithmetic (softmax does not change
# when every key score moves by the same amount), so that Adam's update
# follows rounding noise in both.
def test_gpt_trains_like_handwritten_adamw():
    params = init_gpt(2)
    batches = [batch(10 + i) for i in range(10)]
    lr, wd = 1e-2, 0.01
    m = import_gpt(params, batches[0])
    plan = m.plan(Mesh({"dp": 2}), strategy="dp", train="adamw", lr=lr,
                  weight_decay=wd)
    result = plan.train(batches, params=m.state_dict())

    grad = jax.jit(jax.value_and_grad(lambda p, i, l: gpt(p, i, l)[0]))
    state = (jax.tree_util.tree_map(jnp.zeros_like, params),) * 2
    losses = []
    for step, b in enumerate(batches, 1):
        loss, grads = grad(params, b["ids"], b["labels"])
        params, state = adamw(params, grads, state, step, lr, wd)
        losses.append(float(loss))
    assert relative_error(result["losses"], losses) < 1e-4
    C = params["wte"].shape[1]
    flat, _ = jax.tree_util.tree_flatten_with_path(params)
    for path, value in flat:
        name = ".".join(str(getattr(k, "key", getattr(k, "idx", k)))
                        for k in path)
        got, want = result["parameters"][name], np.asarray(value)
        if name.endswith("attn.b"):
            got = np.concatenate([got[:C], got[2 * C:]])
            want = np.concatenate([want[:C], want[2 * C:]])
        assert relative_error(got, want) < 1e-4, name


def with_fft(x):
    y = x * 2.0
    return jnp.fft.fft(y).real


# Tests that a primitive without a mapping fails at import, naming it and
# the line of the function's source that produced it.
def test_unsupported_primitive_names_primitive_and_source_line():
    lines, first = inspect.getsourcelines(with_fft)
    line = first + next(i for i, t in enumerate(lines) if "jnp.fft.fft" in t)
    with pytest.raises(partita.Error) as info:
        partita.from_jax(with_fft, np.ones((4, 8), np.float32),
                         params_argnum=None)
    msg = str(info.value)
    assert "unsupported primitive fft" in msg, msg
    assert f"test_from_jax.py:{line}:" in msg and "jnp.fft.fft(y)" in msg, msg


def project(params, x):
    return jnp.tanh(x @ params["w"]) @ params["v"]


# Tests that a NamedSharding on an example argument becomes the same
# annotation m.shard writes for the same spec, and that the plan the
# annotations compile to gives JAX's result on the mesh's 4 devices.
def test_jax_shardings_become_annotations():
    from jax.sharding import Mesh as JaxMesh, NamedSharding
    from jax.sharding import PartitionSpec as JP
    devices = np.array(jax.devices()[:4]).reshape(2, 2)
    jmesh = JaxMesh(devices, ("dp", "tp"))
    rng = np.random.default_rng(3)
    params = {"w": rng.standard_normal((8, 16)).astype(np.float32),
              "v": rng.standard_normal((16, 4)).astype(np.float32)}
    x = rng.standard_normal((8, 8)).astype(np.float32)
    sharded_x = jax.device_put(x, NamedSharding(jmesh, JP("dp", None)))
    sharded_w = jax.device_put(params["w"], NamedSharding(jmesh, JP(None, "tp")))
    m = partita.from_jax(project, {"w": sharded_w, "v": params["v"]}, sharded_x)
    mesh = Mesh({"dp": 2, "tp": 2})
    ref = partita.from_jax(project, params, x)
    ref.shard("x", P("dp", None), mesh).shard("w", P(None, "tp"), mesh)
    assert m.sharding("x") == ref.sharding("x") is not None
    assert m.sharding("w") == ref.sharding("w") is not None
    assert m.sharding("v") is None
    plan = m.plan()
    assert plan.num_devices == 4
    out = plan.run({"x": x}, params=m.state_dict())["output0"]
    assert relative_error(out, project(params, x)) < 1e-5


def slices(params, x):
    # An aligned third (reshape + one-hot) and an unaligned range
    # (selection matrix), along a dimension split across the mesh.
    a, b, c = jnp.split(x @ params["w"], 3, axis=1)
    return a * c + jnp.tanh(b), x[:, 3:10] * 2.0


# Tests the split/slice mapping on one rank and with the sliced dimension
# split by tp (the sharding rules of reshape and einsum apply): the results
# match JAX's.
@pytest.mark.parametrize("sharded", [False, True])
def test_split_and_slice_match_jax(sharded):
    rng = np.random.default_rng(4)
    params = {"w": rng.standard_normal((12, 24)).astype(np.float32)}
    x = rng.standard_normal((4, 12)).astype(np.float32)
    m = partita.from_jax(slices, params, x)
    if sharded:
        mesh = Mesh({"tp": 2})
        m.shard("w", P(None, "tp"), mesh).shard("x", P(None, "tp"), mesh)
        plan = m.plan()
        assert plan.num_devices == 2
    else:
        plan = m.plan(Mesh({"dp": 1}), strategy="dp")
    out = plan.run({"x": x}, params=m.state_dict())
    want = slices(params, x)
    assert relative_error(out["output0"], want[0]) < 1e-5
    assert relative_error(out["output1"], want[1]) < 1e-6
