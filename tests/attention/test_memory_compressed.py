"""Memory-compressed attention against a plain reference built on torch's strided conv1d; its state."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lintf
from tests.attention.naive import softmax_over
from tests.attention.stepping import step_through
from tests.conftest import random_qkv

TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def conv_blocks(x, convolution, stride):
    """(B, H, S, D) -> (B, H, ceil(S / k), D): conv1d with kernel = stride = k over zero-filled positions."""
    batch, heads, length, dim = x.shape
    x = F.pad(x, (0, 0, 0, (-length) % stride))
    channels_first = x.reshape(batch * heads, -1, dim).transpose(1, 2)  # (B H, D, S)
    out = F.conv1d(channels_first, convolution.weight, convolution.bias, stride=stride)  # (B H, D, nb)
    return out.transpose(1, 2).reshape(batch, heads, -1, dim)


def naive_memory_compressed(attention, q, k, v, causal, padding):
    """Softmax over compressed blocks; block j is hidden if all its positions are padding and, causally,
    from every query before its last position (j + 1) k - 1."""
    stride = attention.compression
    keep = ~padding[:, None, :, None]
    keys = conv_blocks(k * keep, attention.key_compression, stride)
    values = conv_blocks(v * keep, attention.value_compression, stride)
    blocks = keys.shape[2]
    all_padding = F.pad(padding, (0, blocks * stride - padding.shape[1]), value=True).view(-1, blocks, stride).all(-1)
    visible = ~all_padding[:, None, None, :].expand(-1, 1, q.shape[2], -1)  # (B, 1, N, nb)
    if causal:
        last = torch.arange(blocks) * stride + stride - 1
        visible = visible & (last[None, :] <= torch.arange(q.shape[2])[:, None])
    logits = (q @ keys.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return softmax_over(logits, visible) @ values


def memory_compressed(compression: int = 3):
    return lintf.build_attention("memory_compressed", head_dim=8, compression=compression).double()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("compression, n", [(3, 14), (4, 16), (1, 7), (5, 3)])
def test_memory_compressed_matches_the_reference_forward_and_gradients(causal, compression, n):
    attention = memory_compressed(compression)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n, m=8))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[0, : min(4, n - 1)] = True  # whole blocks and part of one
    padding[1, n - 2 :] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = naive_memory_compressed(attention, q, k, v, causal, padding)
    torch.testing.assert_close(out, expected, **TIGHT)
    upstream = torch.randn_like(out)
    inputs = (q, k, v, *attention.parameters())
    for got, want in zip(torch.autograd.grad(out, inputs, upstream), torch.autograd.grad(expected, inputs, upstream)):
        torch.testing.assert_close(got, want, **TIGHT)


def test_non_causal_cross_attention_fills_the_last_block_with_zeros():
    attention = memory_compressed(4)
    q, k, v = (t.double() for t in random_qkv(n=5, s=10, m=8))
    no_padding = torch.zeros(2, 10, dtype=torch.bool)
    expected = naive_memory_compressed(attention, q, k, v, False, no_padding)
    torch.testing.assert_close(attention(q, k, v, causal=False), expected, **TIGHT)


def test_causal_positions_before_the_first_finished_block_return_zeros():
    attention = memory_compressed(4)
    q, k, v = (t.double() for t in random_qkv(n=9, m=8))
    out = attention(q, k, v, causal=True)
    assert not out[:, :, :3].any() and out[:, :, 3:].abs().sum(-1).gt(0).all()


@pytest.mark.parametrize("compression", [1, 2, 5])
@pytest.mark.parametrize("split", [1, 4, 7, 13])
def test_any_compression_continues_from_a_state_and_by_steps(compression, split):
    attention = memory_compressed(compression)
    q, k, v = (t.double() for t in random_qkv(n=17, m=8))
    whole = attention(q, k, v, causal=True)
    first, state = attention(q[:, :, :split], k[:, :, :split], v[:, :, :split], causal=True, return_state=True)
    assert state.length == split // compression and state.pending == split % compression
    rest = attention(q[:, :, split:], k[:, :, split:], v[:, :, split:], causal=True, state=state)
    torch.testing.assert_close(torch.cat([first, rest], dim=2), whole, **TIGHT)
    stepped, _ = step_through(attention, q[:, :, split:], k[:, :, split:], v[:, :, split:], state)
    torch.testing.assert_close(torch.cat([first, stepped], dim=2), whole, **TIGHT)


def test_values_of_another_size_are_refused_naming_the_convolution():
    attention = memory_compressed()
    q, k, v = random_qkv(n=6, m=5)
    with pytest.raises(ValueError, match=r"values must have the head size M = D = 8 \(the value convolution has D "
                                         r"channels\), got v \(2, 3, 6, 5\)"):
        attention(q, k, v, causal=False)
    with pytest.raises(ValueError, match="value_dim must equal head_dim 8"):
        attention.init_state(2, 3, 5)


def test_bad_compression_is_refused():
    with pytest.raises(ValueError, match="memory_compressed: compression must be a positive int, got 0"):
        lintf.build_attention("memory_compressed", head_dim=8, compression=0)
