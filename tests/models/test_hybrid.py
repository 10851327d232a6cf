"""Hybrid stacks: one attention per layer, each layer carrying its own kind of state."""

from __future__ import annotations

import io

import pytest
import torch

import lintf

from lintf.attention.local import LocalAttention
from lintf.models import EncoderConfig, TransformerEncoder
from lintf.registry import UnknownNameError

SMALL = dict(d_model=16, n_heads=2, dropout=0.0)
PATTERN = ["gated_delta_net", "linear", "local"]
WITH_RECIPE = ["recipe", "projections", "projections"]  # the first layer is a layer recipe (lintf.layers)


def hybrid(n_layers: int = 3, **options) -> TransformerEncoder:
    config = EncoderConfig(**SMALL, n_layers=n_layers, attention=PATTERN, attention_kwargs={"local": {"window": 3}},
                           **options)
    return TransformerEncoder(config).double().eval()


def run_recurrently(model: TransformerEncoder, x: torch.Tensor, state=None) -> torch.Tensor:
    state = model.init_state(x.shape[0], dtype=x.dtype) if state is None else state
    outputs = []
    for t in range(x.shape[1]):
        y_t, state = model.step(x[:, t], state)
        outputs.append(y_t)
    return torch.stack(outputs, dim=1)


def test_each_layer_gets_its_attention_and_options():
    model = hybrid(n_layers=6)
    kinds = [type(layer.attention.attention).registry_name for layer in model.layers]
    assert kinds == PATTERN * 2  # the pattern repeats to n_layers
    assert [layer.attention.attention.window for layer in model.layers if isinstance(layer.attention.attention,
                                                                                     LocalAttention)] == [3, 3]
    per_layer = EncoderConfig(**SMALL, n_layers=2, attention=["local", "local"],
                              attention_kwargs=[{"window": 2}, {"window": 5}])
    assert [layer.attention.attention.window for layer in TransformerEncoder(per_layer).layers] == [2, 5]


@pytest.mark.parametrize("layer", ["projections", WITH_RECIPE])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_recurrent_step_equals_the_parallel_forward(norm, layer):
    model = hybrid(norm=norm, layer=layer)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    with torch.no_grad():
        parallel = model(x, causal=True)
        torch.testing.assert_close(run_recurrently(model, x), parallel)
        prompt, state = model.prefill(x[:, :4])  # a parallel prompt, then one position at a time
        torch.testing.assert_close(torch.cat([prompt, run_recurrently(model, x[:, 4:], state)], 1), parallel)
    kinds = {type(layer_state).__name__ for layer_state in state}
    assert len(kinds) == 3  # the delta rule's memory, linear's sums, local's window


def test_feature_map_goes_to_the_layers_that_take_one():
    model = hybrid(feature_map="relu")
    assert type(model.layers[1].attention.attention.feature_map).registry_name == "relu"
    with pytest.raises(ValueError, match="attention 'softmax' takes no feature map"):
        TransformerEncoder(EncoderConfig(**SMALL, n_layers=2, attention=["softmax", "local"], feature_map="relu"))


def test_a_checkpoint_round_trip_restores_the_stack_and_its_states():
    trained = hybrid(layer=WITH_RECIPE)
    buffer = io.BytesIO()
    torch.save({"encoder": trained.config.to_dict(), "state_dict": trained.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # plain data: loading runs no code
    restored = TransformerEncoder(saved["encoder"]).double().eval()
    restored.load_state_dict(saved["state_dict"])
    assert restored.config == trained.config
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(restored(x), trained(x))
        _, state = trained.prefill(x[:, :5])
        torch.testing.assert_close(run_recurrently(restored, x[:, 5:], state), trained(x)[:, 5:])


@pytest.mark.parametrize("options, message", [
    (dict(n_layers=4, attention=["linear", "softmax", "local"]),
     r"encoder.attention has 3 entries for n_layers 4: give one per layer \(4\) or a pattern .* \(1, 2, 4\)"),
    (dict(n_layers=2, attention=[]), "encoder.attention is an empty list"),
    (dict(n_layers=2, attention=["linear", "softmax"], attention_kwargs={"local": {"window": 2}}),
     r"keyed by name, but local is not among them \(linear, softmax\)"),
    (dict(n_layers=4, attention=["linear", "local"], attention_kwargs=[{}, {}, {}]),
     "encoder.attention_kwargs has 3 entries for n_layers 4"),
    (dict(n_layers=2, attention=["linear", "local"], attention_kwargs={"linear": {"feature_map": "relu"}}),
     "give feature_map as encoder.feature_map"),
])
def test_refusals_name_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**SMALL, **options)


def test_an_unknown_name_in_the_list_is_refused_with_the_known_ones():
    with pytest.raises(UnknownNameError, match=r"encoder.attention\[1\]: unknown attention 'lokal'; known .*local"):
        EncoderConfig(**SMALL, n_layers=2, attention=["linear", "lokal"])


def test_the_command_line_refuses_a_wrong_length_in_one_paragraph(tmp_path, capsys):
    from lintf.run.cli import main
    from tests.cli.helpers import tiny

    with pytest.raises(SystemExit) as exit_info:
        main(tiny(tmp_path, "--model.encoder.n_layers", "3", "--model.encoder.attention", "[linear, local]"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("lintf: error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    assert "encoder.attention has 2 entries for n_layers 3" in errors[0]
    with pytest.raises(SystemExit):
        main(tiny(tmp_path, "--model.encoder.n_layers", "2", "--model.encoder.attention", "[linear, lokal]"))
    assert "unknown attention 'lokal'" in capsys.readouterr().err


def test_a_class_path_in_the_config_imports_no_module(tmp_path, monkeypatch):
    """A config (a checkpoint's, a model directory's) names registered classes: it never imports a module."""
    marker = tmp_path / "imported"
    (tmp_path / "config_named_module.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyError, match="config_named_module.X"):
        EncoderConfig(attention=["linear", "config_named_module.X"], n_layers=2)
    assert not marker.exists()
    registered = type(lintf.build_attention("linear", head_dim=4))
    path = f"{registered.__module__}.{registered.__qualname__}"
    assert EncoderConfig(attention=[path, "local"], n_layers=2).attention == ["linear", "local"]
