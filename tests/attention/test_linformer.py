"""Linformer against a plain reference from its definition; its length limit and its refusal of causal use."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.conftest import random_qkv

TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def naive_linformer(attention, q, k, v, padding):
    """softmax(q (E k)^T / sqrt(D)) (F v), E and F cut to the first S columns, padded keys and values zero."""
    n_keys = k.shape[2]
    keep = ~padding[:, None, :, None]
    projected_k = torch.einsum("ps,bhsd->bhpd", attention.key_projection[:, :n_keys], k * keep)
    projected_v = torch.einsum("ps,bhsm->bhpm", attention.value_projection[:, :n_keys], v * keep)
    weights = torch.softmax(q @ projected_k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ projected_v


def linformer(**kwargs):
    return lintf.build_attention("linformer", head_dim=8, **kwargs).double()


@pytest.mark.parametrize("n, s", [(9, 9), (4, 16), (16, 5)])
def test_linformer_matches_the_reference_forward_and_gradients(n, s):
    attention = linformer(max_length=16, projected_length=6)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n, s=s, m=5))
    padding = torch.zeros(2, s, dtype=torch.bool)
    padding[1, s // 2 :] = True
    out = attention(q, k, v, causal=False, key_padding_mask=padding)
    expected = naive_linformer(attention, q, k, v, padding)
    torch.testing.assert_close(out, expected, **TIGHT)
    upstream = torch.randn_like(out)
    inputs = (q, k, v, attention.key_projection, attention.value_projection)
    for got, want in zip(torch.autograd.grad(out, inputs, upstream), torch.autograd.grad(expected, inputs, upstream)):
        torch.testing.assert_close(got, want, **TIGHT)


def test_the_projections_are_learned_parameters_of_shape_k_by_max_length():
    attention = linformer(max_length=32, projected_length=6)
    shapes = {name: tuple(p.shape) for name, p in attention.named_parameters()}
    assert shapes == {"key_projection": (6, 32), "value_projection": (6, 32)}


def test_more_keys_than_max_length_are_refused_naming_the_remedy():
    attention = linformer(max_length=16)
    q, k, v = (t.double() for t in random_qkv(n=4, s=17))
    message = (r"linformer: 17 keys exceed max_length = 16, the length its projections E, F \(64 x 16\) cover; "
               r"build it with max_length >= 17 \(e.g. attention_kwargs \{max_length: 17\}\)")
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, causal=False)
    assert attention(q, k[:, :, :16], v[:, :, :16], causal=False).shape == (2, 3, 4, 5)


def test_causal_use_is_refused_saying_why():
    attention = linformer()
    q, k, v = (t.double() for t in random_qkv(n=6))
    with pytest.raises(ValueError, match=r"linformer attention is non-causal only, so it cannot run with causal=True "
                                         r"\(each of its k projected keys and values is a weighted sum over all S "
                                         r"positions, the future included.*causal attention: .*linear"):
        attention(q, k, v, causal=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_length": 0}, "linformer: max_length must be a positive int, got 0"),
    ({"projected_length": 2.5}, "linformer: projected_length must be a positive int, got 2.5"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lintf.build_attention("linformer", head_dim=8, **kwargs)
