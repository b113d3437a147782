"""Annotations from Python: JAX-style and DTensor-style specs, and errors."""

import pytest

import partita
from partita import Mesh, P, Partial, Replicate, Shard

MESH = Mesh({"dp": 2, "tp": 2})


def annotated(spec_by_name, model_factory):
    m = model_factory()
    for name, spec in spec_by_name.items():
        m.shard(name, spec, MESH)
    return m


# Tests that both spellings give the identical #dist.sharding, for splits,
# replication, two axes on one dimension and partial sums.
@pytest.mark.parametrize("jax,dtensor", [
    (P("dp", None), [Shard(0), Replicate()]),
    (P(None, "tp"), [Replicate(), Shard(1)]),
    (P(("dp", "tp"), None), [Shard(0), Shard(0)]),
    (P(None, None), [Replicate(), Replicate()]),
    (P(None, "tp", partial="dp"), [Partial(), Shard(-1)]),
])
def test_spec_forms_agree(jax, dtensor):
    def make():
        return partita.model("gpt", layers=1, hidden=16, heads=2, seq=8,
                             vocab=32, batch=4)
    a = make().shard("layers.0.mlp.w1", jax, MESH)
    b = make().shard("layers.0.mlp.w1", dtensor, MESH)
    sharding = a.sharding("layers.0.mlp.w1")
    assert sharding is not None and sharding.startswith("#dist.sharding<@mesh")
    assert sharding == b.sharding("layers.0.mlp.w1")
    assert str(a) == str(b)
    assert 'dist.mesh @mesh <["dp"=2, "tp"=2]>' in str(a)


def test_glob_matches_every_layer(small_gpt):
    small_gpt.shard("layers.*.mlp.w1", P(None, "tp"), MESH)
    shards = {a.name: a.sharding for a in small_gpt.parameters}
    assert shards["layers.0.mlp.w1"] == shards["layers.1.mlp.w1"]
    assert shards["layers.0.mlp.w1"] == '#dist.sharding<@mesh, [{}p0, {"tp"}p0]>'
    assert shards["layers.0.mlp.w2"] is None


def test_inputs_can_be_sharded(small_gpt):
    small_gpt.shard("ids", P("dp", None), MESH)
    assert small_gpt.sharding("ids") == '#dist.sharding<@mesh, [{"dp"}p0, {}p0]>'


def test_unknown_axis_names_tensor_dimension_and_axis(small_gpt):
    with pytest.raises(partita.Error) as info:
        small_gpt.shard("layers.0.mlp.w1", P(None, "ep"), MESH)
    msg = str(info.value)
    assert "'layers.0.mlp.w1'" in msg and "dimension 1" in msg and "'ep'" in msg


def test_unknown_partial_axis(small_gpt):
    with pytest.raises(partita.Error, match="'wte' partial: unknown mesh axis 'x'"):
        small_gpt.shard("wte", P(None, None, partial="x"), MESH)


def test_non_divisible_dimension_names_tensor_dimension_and_axis():
    m = partita.model("mlp", layers=1, hidden=6, vocab=5, batch=4)
    name = [a.name for a in m.parameters if 5 in a.shape][0]
    dim = [a.shape for a in m.parameters if a.name == name][0].index(5)
    spec = [None] * len([a.shape for a in m.parameters if a.name == name][0])
    spec[dim] = "tp"
    with pytest.raises(partita.Error) as info:
        m.shard(name, P(*spec), MESH)
    msg = str(info.value)
    assert f"'{name}'" in msg and f"dimension {dim} of size 5" in msg
    assert "mesh axis 'tp'" in msg


def test_dtensor_errors(small_gpt):
    with pytest.raises(partita.Error, match="one per mesh axis"):
        small_gpt.shard("wte", [Shard(0)], MESH)
    with pytest.raises(partita.Error, match="no dimension 2 .* mesh axis 'dp'"):
        small_gpt.shard("wte", [Shard(2), Replicate()], MESH)


def test_rank_mismatch_and_no_match(small_gpt):
    with pytest.raises(partita.Error, match="'wte' has 2 dimensions"):
        small_gpt.shard("wte", P("dp"), MESH)
    with pytest.raises(partita.Error, match="no parameter or input matches"):
        small_gpt.shard("nothing.*", P("dp"), MESH)


def test_mesh_must_match_the_models(small_gpt):
    small_gpt.shard("ids", P("dp", None), MESH)
    with pytest.raises(partita.Error, match="mesh @mesh is dp=2,tp=2, not dp=4"):
        small_gpt.shard("labels", P("dp", None), Mesh({"dp": 4}))


def test_bad_mesh():
    with pytest.raises(partita.Error, match="size 0"):
        Mesh({"dp": 0})
