"""The softmax layer recipe against a naive float64 reference (loops over positions and rotation pairs), and its
continued, stepped, padded and packed forms against its own whole forward."""

from __future__ import annotations

import math

import pytest
import torch

from lintf.attention.documents import select_document
from lintf.layers import SoftmaxLayer
from lintf.models import EncoderConfig, TransformerEncoder

D_MODEL, HEADS = 16, 2
TIGHT = {"atol": 1e-10, "rtol": 1e-10}


def softmax_layer(**options) -> SoftmaxLayer:
    torch.manual_seed(0)
    layer = SoftmaxLayer(D_MODEL, HEADS, **options).double().eval()
    with torch.no_grad():  # norm weights away from 1, so a missing norm weight shows
        for name in ("q_norm", "k_norm"):
            if getattr(layer, name) is not None:
                getattr(layer, name).weight.uniform_(0.5, 1.5)
    return layer


def naive(layer: SoftmaxLayer, x: torch.Tensor) -> torch.Tensor:
    """One sequence x (N, d_model) -> (N, d_model), position by position."""
    length, heads, width = x.shape[0], layer.n_heads, layer.head_dim
    base = 1.0 / float(layer.inv_freq[1]) ** (width / 2) if width > 2 else 10000.0

    def project(name: str) -> torch.Tensor:
        y = x @ getattr(layer, f"{name}_proj").weight.T  # (N, C)
        conv = getattr(layer, f"{name}_conv1d", None)
        if conv is not None:
            kernel = conv.weight[:, 0, :]  # (C, K)
            size = kernel.shape[1]
            y = torch.stack([sum(kernel[:, j] * y[t - size + 1 + j] for j in range(size) if t - size + 1 + j >= 0)
                             for t in range(length)])
        return y.view(length, heads, width)

    def normed(t: torch.Tensor, norm) -> torch.Tensor:
        if norm is None:
            return t
        return t / torch.sqrt(t.square().mean(-1, keepdim=True) + norm.eps) * norm.weight

    def rotated(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        for position in range(length):
            for i in range(width // 2):
                angle = position * base ** (-2 * i / width)
                a, b = t[position, :, i], t[position, :, i + width // 2]
                out[position, :, i] = a * math.cos(angle) - b * math.sin(angle)
                out[position, :, i + width // 2] = a * math.sin(angle) + b * math.cos(angle)
        return out

    q, k, v = project("q"), project("k"), project("v")
    q, k = rotated(normed(q, layer.q_norm)), rotated(normed(k, layer.k_norm))
    out = torch.zeros(length, heads, width, dtype=x.dtype)
    for t in range(length):
        for h in range(heads):
            scores = torch.stack([q[t, h] @ k[j, h] / math.sqrt(width) for j in range(t + 1)])
            out[t, h] = (scores.softmax(0)[:, None] * v[: t + 1, h]).sum(0)
    out = out.reshape(length, -1)
    if layer.g_proj is not None:
        out = out * torch.sigmoid(x @ layer.g_proj.weight.T)
    return out @ layer.o_proj.weight.T


@pytest.mark.parametrize("options", [{}, {"short_conv": None}, {"short_conv": 3, "output_gate": False,
                                                                   "qk_norm": False}, {"rotary_base": 100.0}])
def test_forward_matches_a_naive_reference(options):
    layer = softmax_layer(**options)
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out, _ = layer(x, True)
        for row in range(2):
            torch.testing.assert_close(out[row], naive(layer, x[row]), **TIGHT)


@pytest.mark.parametrize("options", [{}, {"short_conv": None}])
def test_a_sequence_split_and_stepped_gives_the_whole(options):
    layer = softmax_layer(**options)
    x = torch.randn(2, 11, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = layer(x, True)
        first, state = layer(x[:, :4], True, return_state=True)
        second, state = layer(x[:, 4:8], True, state=state, return_state=True)
        steps = []
        for t in range(8, 11):
            out, state = layer.step(x[:, t], state)
            steps.append(out)
    torch.testing.assert_close(torch.cat([first, second, torch.stack(steps, dim=1)], dim=1), whole, **TIGHT)
    assert state.length == 11


def test_gradients_reach_the_earlier_piece_through_the_state():
    layer = softmax_layer(short_conv=4)
    x = torch.randn(1, 7, D_MODEL, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(1, 7, D_MODEL, dtype=torch.float64)
    (want,) = torch.autograd.grad((layer(x, True)[0] * upstream).sum(), x)
    first, state = layer(x[:, :3], True, return_state=True)
    second, _ = layer(x[:, 3:], True, state=state)
    (got,) = torch.autograd.grad((torch.cat([first, second], dim=1) * upstream).sum(), x)
    torch.testing.assert_close(got, want, **TIGHT)


def test_padding_takes_no_position():
    layer = softmax_layer(short_conv=4)
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, 3, D_MODEL, dtype=torch.float64), x, torch.randn(1, 2, D_MODEL,
                                                                                         dtype=torch.float64)], dim=1)
    mask = torch.tensor([[True] * 3 + [False] * 6 + [True] * 2])
    with torch.no_grad():
        want, _ = layer(x, True)
        got, _ = layer(padded, True, key_padding_mask=mask)
        _, state = layer(padded[:, :5], True, key_padding_mask=mask[:, :5], return_state=True)
        rest, _ = layer(padded[:, 5:9], True, state=state)
    torch.testing.assert_close(got[:, 3:9], want, **TIGHT)
    torch.testing.assert_close(rest, want[:, 2:], **TIGHT)


def test_packed_documents_restart_their_positions_and_carry_their_states():
    layer = softmax_layer(short_conv=2)
    lengths = (4, 4)
    x = torch.randn(1, 8, D_MODEL, dtype=torch.float64)
    cu_seqlens = torch.tensor([0, 4, 8])
    with torch.no_grad():
        packed, state = layer(x, True, return_state=True, cu_seqlens=cu_seqlens)
        for index, doc in enumerate(x.split(list(lengths), dim=1)):
            torch.testing.assert_close(packed[:, 4 * index : 4 * index + 4], layer(doc, True)[0], **TIGHT)
            alone = layer(doc, True, return_state=True)[1]
            tensors = tuple(key for key, value in zip(state._fields, state) if isinstance(value, torch.Tensor))
            for got, want in zip(select_document(state, index, tensors), alone):
                torch.testing.assert_close(got, want, **TIGHT)


def test_an_encoder_with_the_softmax_recipe_steps_as_it_runs():
    torch.manual_seed(0)
    config = EncoderConfig(d_model=D_MODEL, n_heads=HEADS, n_layers=2, dropout=0.0,
                           attention=["gated_delta_net", "softmax"], layer="recipe")
    model = TransformerEncoder(config).double().eval()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        whole = model(x)
        state = model.init_state(2, dtype=torch.float64)
        steps = []
        for t in range(6):
            out, state = model.step(x[:, t], state)
            steps.append(out)
    torch.testing.assert_close(torch.stack(steps, dim=1), whole, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("options, message", [({"n_heads": 3}, "even head width"), ({"n_heads": 16}, "even head"),
                                              ({"rotary_base": 1.0}, "rotary_base"), ({"short_conv": 0}, "short_conv")])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        SoftmaxLayer(**{"d_model": D_MODEL, "n_heads": HEADS, **options})


def test_a_state_of_another_batch_and_a_non_causal_call_are_refused():
    layer = softmax_layer()
    x = torch.randn(2, 3, D_MODEL, dtype=torch.float64)
    with pytest.raises(ValueError, match="causal"):
        layer(x, False)
    with pytest.raises(ValueError, match="SoftmaxLayer"):
        layer(x, True, state=layer.init_state(3, dtype=torch.float64))
