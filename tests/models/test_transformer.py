"""The transformer stack: recurrent stepping equals the parallel forward; training works for every attention."""

from __future__ import annotations

import pytest
import torch

import lintf
from lintf.models import EncoderConfig, TransformerEncoder
from tests.conftest import attention_names, exact_step_attention_names

SMALL = dict(d_model=16, n_layers=2, n_heads=2, dropout=0.0)


def run_recurrently(model: TransformerEncoder, x: torch.Tensor) -> torch.Tensor:
    state = model.init_state(x.shape[0], dtype=x.dtype)
    outputs = []
    for t in range(x.shape[1]):
        y_t, state = model.step(x[:, t], state)
        outputs.append(y_t)
    return torch.stack(outputs, dim=1)


@pytest.mark.parametrize("name", exact_step_attention_names())
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_recurrent_stepping_equals_parallel_forward(name, norm):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name, norm=norm)).eval()
    x = torch.randn(2, 11, 16)
    with torch.no_grad():
        parallel = model(x, causal=True)
        recurrent = run_recurrently(model, x)
    torch.testing.assert_close(recurrent, parallel, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("feature_map", ["relu", "favor", "polynomial"])
def test_recurrent_stepping_with_each_feature_map(feature_map):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention="linear", feature_map=feature_map)).double().eval()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(run_recurrently(model, x), model(x, causal=True))


def test_model_trained_in_parallel_samples_as_rnn_from_its_state_dict():
    trained = TransformerEncoder(EncoderConfig(**SMALL, attention="linear", feature_map="favor"))
    optimiser = torch.optim.Adam(trained.parameters(), lr=1e-2)
    x = torch.randn(4, 12, 16)
    for _ in range(3):
        optimiser.zero_grad()
        trained(x, causal=True).square().mean().backward()
        optimiser.step()
    sampler = TransformerEncoder(EncoderConfig(**SMALL, attention="linear", feature_map="favor"))
    sampler.load_state_dict(trained.state_dict())
    trained.eval(), sampler.eval()
    with torch.no_grad():
        torch.testing.assert_close(run_recurrently(sampler, x), trained(x, causal=True), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", attention_names())
def test_every_attention_trains(name):
    """A few Adam steps fit a fixed next-token regression target better than at the start."""
    torch.manual_seed(0)
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name))
    causal = lintf.registry.ATTENTIONS.get(name).supports_causal  # non-causal-only attentions train bidirectionally
    head = torch.nn.Linear(16, 1)
    x, target = torch.randn(8, 16, 16), torch.randn(8, 16, 1)
    optimiser = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=3e-3)
    losses = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = torch.nn.functional.mse_loss(head(model(x, causal=causal)), target)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("name", attention_names())
def test_bidirectional_forward_with_padding(name):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name)).eval()
    x = torch.randn(2, 10, 16)
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, 6:] = True
    out = model(x, causal=False, key_padding_mask=padding)
    assert out.shape == (2, 10, 16) and torch.isfinite(out).all()


def test_attention_kwargs_reach_the_attention():
    model = TransformerEncoder(EncoderConfig(**SMALL, attention="reformer", attention_kwargs={"n_hashes": 4, "chunk_size": 8}))
    attention = model.layers[0].attention.attention
    assert attention.n_hashes == 4 and attention.chunk_size == 8
    favor = TransformerEncoder(EncoderConfig(**SMALL, feature_map="favor", feature_map_kwargs={"n_features": 24}))
    assert favor.layers[1].attention.attention.feature_map.out_dim == 24


def test_bad_configuration_errors():
    with pytest.raises(KeyError, match="unknown attention 'linera'; known attention names: .*linear"):
        TransformerEncoder(EncoderConfig(**SMALL, attention="linera"))
    with pytest.raises(ValueError, match="attention 'softmax' takes no feature map.*attentions with a feature map: .*linear"):
        TransformerEncoder(EncoderConfig(**SMALL, attention="softmax", feature_map="favor"))
    with pytest.raises(KeyError, match="unknown feature map 'elo'"):
        TransformerEncoder(EncoderConfig(**SMALL, feature_map="elo"))
    with pytest.raises(TypeError, match="ReformerAttention.*n_hash.*accepts"):
        TransformerEncoder(EncoderConfig(**SMALL, attention="reformer", attention_kwargs={"n_hash": 2}))
    with pytest.raises(ValueError, match=r"d_model \(10\) must be a positive multiple of n_heads \(4\)"):
        TransformerEncoder(EncoderConfig(d_model=10, n_heads=4))
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        TransformerEncoder(EncoderConfig(**SMALL, activation="tanh"))


def test_bad_shapes_are_reported():
    model = TransformerEncoder(EncoderConfig(**SMALL))
    with pytest.raises(ValueError, match=r"x must be \(B, N, 16\), got \(2, 5, 8\)"):
        model(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"x_t must be \(B, 16\)"):
        model.step(torch.randn(2, 1, 16), model.init_state(2))
    with pytest.raises(ValueError, match="state has 1 layers, model has 2"):
        model.step(torch.randn(2, 16), model.init_state(2)[:1])


def test_public_api_is_exported():
    for name in ("register_attention", "register_feature_map", "list_attentions", "list_feature_maps",
                 "build_attention", "build_feature_map"):
        assert callable(getattr(lintf, name))


def continuing_attention_names() -> list[str]:
    from lintf.registry import ATTENTIONS

    return [n for n in exact_step_attention_names() if getattr(ATTENTIONS.get(n), "continues_exactly", True)]


@pytest.mark.parametrize("name", continuing_attention_names())
@pytest.mark.parametrize("split", [1, 6, 11])
def test_prefill_then_step_or_forward_continues_the_whole_sequence(name, split):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name)).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    with torch.no_grad():
        whole = model(x, causal=True)
        prefix, state = model.prefill(x[:, :split])
        stepped = [model.step(x[:, t], state)[0] for t in [split]]  # the next position from the prefill state
        rest, _ = model(x[:, split:], causal=True, state=state, return_state=True)
    torch.testing.assert_close(prefix, whole[:, :split], atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(stepped[0], whole[:, split], atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(rest, whole[:, split:], atol=1e-10, rtol=1e-9)


def test_encoder_state_errors():
    model = TransformerEncoder(EncoderConfig(**SMALL))
    x = torch.randn(1, 4, 16)
    with pytest.raises(ValueError, match="state has 1 layers, model has 2"):
        model(x, state=model.init_state(1)[:1])
    with pytest.raises(ValueError, match="causal"):
        model(x, causal=False, return_state=True)
