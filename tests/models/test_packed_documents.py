"""Packed documents through layers and whole models: a packed row equals each document run alone.

Covers every registered layer recipe (its short convolution must not read across a document start),
the encoder with projection layers, a hybrid stack with a recipe layer, a reversible stack, and the
position codes of an autoregressive model (restarting at each document).
"""

from __future__ import annotations

import pytest
import torch

from lintf.attention.documents import select_document
from lintf.models import EncoderConfig, TransformerEncoder
from lintf.registry import ATTENTIONS, LAYERS
from lintf.tasks.stream_lm import StreamLanguageModelTask

LENGTHS = (6, 1, 2, 9)  # documents shorter than the short convolution's kernel (4) included
D_MODEL = 16
TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def boundaries(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)


def split(x: torch.Tensor, lengths) -> list[torch.Tensor]:
    """(1, N, ...) -> each document's (1, n_d, ...)."""
    return list(x.split(list(lengths), dim=1))


def assert_packed_equals_alone(run, x: torch.Tensor, lengths=LENGTHS) -> None:
    """``run(x, cu_seqlens)`` on the packed row == ``run`` of each document alone: outputs and gradients of x."""
    x = x.detach().requires_grad_()
    alone = torch.cat([run(doc, None) for doc in split(x, lengths)], dim=1)
    packed = run(x, boundaries(lengths))
    torch.testing.assert_close(packed, alone, **TIGHT)
    upstream = torch.randn_like(alone)
    (want,) = torch.autograd.grad(alone, x, upstream)
    (got,) = torch.autograd.grad(packed, x, upstream)
    torch.testing.assert_close(got, want, **TIGHT)


def layer_recipe(name: str) -> torch.nn.Module:
    return LAYERS.build(name, d_model=D_MODEL, n_heads=2).double().eval()


@pytest.mark.parametrize("name", LAYERS.names())
def test_a_layer_recipe_on_packed_documents_equals_each_document_alone(name):
    layer = layer_recipe(name)

    def run(x, cu_seqlens):
        kwargs = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        return layer(x, True, **kwargs)[0]

    assert_packed_equals_alone(run, torch.randn(1, sum(LENGTHS), D_MODEL, dtype=torch.float64))


@pytest.mark.parametrize("name", LAYERS.names())
def test_a_layer_recipe_carries_one_state_per_document(name):
    layer = layer_recipe(name)
    cached = bool(getattr(layer, "cache_entries", ()))  # a cache of past keys joins documents of equal length only
    first, second = ((3, 3, 3), (2, 2, 2)) if cached else ((3, 1, 6), (2, 5, 1))
    x1 = torch.randn(1, sum(first), D_MODEL, dtype=torch.float64)
    x2 = torch.randn(1, sum(second), D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out1, state = layer(x1, True, return_state=True, cu_seqlens=boundaries(first))
        out2, state = layer(x2, True, state=state, return_state=True, cu_seqlens=boundaries(second))
        for index, (a, b) in enumerate(zip(split(x1, first), split(x2, second))):
            want, want_state = layer(torch.cat([a, b], dim=1), True, return_state=True)
            got = torch.cat([split(out1, first)[index], split(out2, second)[index]], dim=1)
            torch.testing.assert_close(got, want, **TIGHT)
            tensors = tuple(key for key, value in zip(state._fields, state) if isinstance(value, torch.Tensor))
            for got_field, want_field in zip(select_document(state, index, tensors), want_state):
                torch.testing.assert_close(got_field, want_field, **TIGHT)


def test_a_layer_recipe_without_a_packed_recurrence_runs_each_document_alone(monkeypatch):
    layer = layer_recipe("gated_delta_net")
    x = torch.randn(1, sum(LENGTHS), D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        native = layer(x, True, cu_seqlens=boundaries(LENGTHS))[0]
        monkeypatch.setattr(type(layer), "supports_packed", False)
        torch.testing.assert_close(layer(x, True, cu_seqlens=boundaries(LENGTHS))[0], native, **TIGHT)


def encoder(attention, layer="projections", **options) -> TransformerEncoder:
    config = EncoderConfig(d_model=D_MODEL, n_heads=2, n_layers=len(attention), dropout=0.0, attention=attention,
                           layer=layer, attention_kwargs={"local": {"window": 3}} if "local" in attention else None,
                           **options)
    return TransformerEncoder(config).double().eval()


STACKS = {
    "softmax": {"attention": ["softmax", "softmax"]},
    "linear": {"attention": ["linear", "linear"]},
    "hybrid": {"attention": ["gated_delta_net", "linear", "local"]},
    "hybrid with a recipe": {"attention": ["gated_delta_net", "gla", "softmax"],
                                 "layer": ["recipe", "recipe", "projections"]},
    "reversible": {"attention": ["retention", "local"], "reversible": True},
    "post-norm": {"attention": ["gated_linear", "delta_net"], "norm": "post"},
}


@pytest.mark.parametrize("stack", STACKS)
def test_an_encoder_on_packed_documents_equals_each_document_alone(stack):
    model = encoder(**STACKS[stack])

    def run(x, cu_seqlens):
        return model(x, causal=True, cu_seqlens=cu_seqlens)

    assert_packed_equals_alone(run, torch.randn(1, sum(LENGTHS), D_MODEL, dtype=torch.float64))


@pytest.mark.parametrize("name", [n for n in ATTENTIONS.names() if ATTENTIONS.get(n).supports_causal])
def test_a_one_layer_encoder_of_each_causal_attention_on_packed_documents(name):
    model = encoder([name])
    x = torch.randn(1, sum(LENGTHS), D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.manual_seed(3)  # attentions that draw at random draw the same in both, document after document
        alone = torch.cat([model(doc) for doc in split(x, LENGTHS)], dim=1)
        torch.manual_seed(3)
        torch.testing.assert_close(model(x, cu_seqlens=boundaries(LENGTHS)), alone, **TIGHT)


def test_an_encoder_continues_each_packed_document_from_its_state():
    model = encoder(attention=["gated_delta_net", "gla", "local"], layer=["recipe", "recipe", "projections"])
    first, second = (4, 7), (3, 2)
    x1, x2 = (torch.randn(1, sum(lengths), D_MODEL, dtype=torch.float64) for lengths in (first, second))
    with torch.no_grad():
        out1, state = model(x1, return_state=True, cu_seqlens=boundaries(first))
        out2, _ = model(x2, state=state, return_state=True, cu_seqlens=boundaries(second))
        for index, (a, b) in enumerate(zip(split(x1, first), split(x2, second))):
            want = model(torch.cat([a, b], dim=1))
            got = torch.cat([split(out1, first)[index], split(out2, second)[index]], dim=1)
            torch.testing.assert_close(got, want, **TIGHT)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
def test_a_language_model_restarts_positions_at_each_document(positions):
    encoder_config = EncoderConfig(d_model=D_MODEL, n_heads=2, n_layers=2, dropout=0.0,
                                   attention=["gated_delta_net", "softmax"])
    model = StreamLanguageModelTask(vocab_size=11, max_length=32, encoder=encoder_config, positions=positions,
                                    between_segments="reset").double().eval()
    tokens = torch.randint(0, 11, (1, sum(LENGTHS)))
    with torch.no_grad():
        alone = torch.cat([model(doc) for doc in split(tokens, LENGTHS)], dim=1)
        torch.testing.assert_close(model(tokens, cu_seqlens=boundaries(LENGTHS)), alone, **TIGHT)
        if positions != "none":  # the codes matter: without the restart the packed row differs
            assert not torch.allclose(model(tokens), alone)


def test_an_encoder_refuses_packed_documents_in_more_than_one_row():
    model = encoder(**STACKS["linear"])
    with pytest.raises(ValueError, match=r"one row: x must be \(1, N, 16\)"):
        model(torch.randn(2, 5, D_MODEL, dtype=torch.float64), cu_seqlens=boundaries((2, 3)))
