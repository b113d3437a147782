"""Models: built-in builders, parsing, printing, and errors with locations."""

import pytest

import partita


def test_model_prints_nn_ir(small_gpt):
    text = str(small_gpt)
    assert "func.func @forward" in text
    assert 'nn.param = "layers.1.mlp.w2"' in text
    names = [a.name for a in small_gpt.parameters]
    assert names[0] == "wte" and "lm_head" in names
    assert [a.name for a in small_gpt.inputs] == ["ids", "labels"]
    assert small_gpt.parameters[0].shape == (32, 16)


# Tests that printed IR parses back to the same text, from a string and a file.
def test_parse_and_load_round_trip(small_gpt, tmp_path):
    text = str(small_gpt)
    assert str(partita.parse(text)) == text
    path = tmp_path / "gpt.mlir"
    path.write_text(text)
    assert str(partita.load(path)) == text


def test_parse_error_carries_located_diagnostics():
    bad = "func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {\n" \
          "  %y = nn.nosuchop %x : tensor<4xf32>\n" \
          "  return %y : tensor<4xf32>\n}\n"
    with pytest.raises(partita.Error) as info:
        partita.parse(bad, "bad.mlir")
    err = info.value
    assert err.diagnostics, err
    first = err.diagnostics[0]
    assert first.severity == "error"
    assert first.location == "bad.mlir:2:8"
    assert "nosuchop" in first.message
    assert "bad.mlir:2:8" in str(err)


def test_verifier_error_is_located():
    bad = "func.func @forward(%x: tensor<4xf32>, %y: tensor<5xf32>) -> " \
          "tensor<4xf32> {\n  %z = nn.add %x, %y : tensor<4xf32>\n" \
          "  return %z : tensor<4xf32>\n}\n"
    with pytest.raises(partita.Error) as info:
        partita.parse(bad, "v.mlir")
    assert info.value.diagnostics[0].location.startswith("v.mlir:2:")


def test_empty_module_is_an_error():
    with pytest.raises(partita.Error, match="defines no func.func"):
        partita.parse("module {}", "empty.mlir")


def test_model_config_errors():
    with pytest.raises(partita.Error, match="unknown model kind 'bert'"):
        partita.model("bert")
    with pytest.raises(partita.Error, match="heads"):
        partita.model("gpt", hidden=10, heads=3)
    with pytest.raises(partita.Error, match="dtype"):
        partita.model("mlp", dtype="f8")
