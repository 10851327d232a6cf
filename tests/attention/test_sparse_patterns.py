"""The sparse patterns against masked softmax with an explicit (N, S) mask built from each definition."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.attention.naive import key_mask, softmax_over
from tests.conftest import random_qkv


def masked_reference(q, k, v, pattern: torch.Tensor, causal: bool, padding=None):
    """softmax over the keys a bool pattern (H|1, N, S) shows, with causality and padding."""
    visible = key_mask(padding, q.shape[0], q.shape[2], k.shape[2], causal) & pattern  # (B, H|1, N, S)
    return softmax_over((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]), visible) @ v


def grid(n: int, s: int):
    """Query positions i (N, 1) and key positions j (1, S)."""
    return torch.arange(n)[:, None], torch.arange(s)[None, :]


def fixed_pattern(n, s, heads, causal, block, summary):
    i, j = grid(n, s)
    same_block = i // block == j // block
    is_summary = j % block >= block - summary
    other_block = j // block < i // block if causal else j // block != i // block
    return (same_block | (is_summary & other_block))[None]


def strided_pattern(n, s, heads, causal, stride):
    i, j = grid(n, s)
    window = (i - j).abs() < stride
    column = (i - j) % stride == 0
    return (window | column)[None]


def blockwise_pattern(n, s, heads, causal, block, shifts=(0, 1)):
    i, j = grid(n, s)
    n_blocks = -(-s // block)
    rows = []
    for h in range(heads):
        shift = shifts[h % len(shifts)]
        if causal:
            target = torch.where(i // block >= shift, i // block - shift, i // block)
        else:
            target = (i // block + shift) % n_blocks
        rows.append(j // block == target)
    return torch.stack(rows)


def axial_pattern(n, s, heads, causal, width):
    i, j = grid(n, s)
    row, column = i // width == j // width, i % width == j % width
    row_heads = math.ceil(heads / 2)
    return torch.stack([row] * row_heads + [column] * (heads - row_heads))


def longformer_pattern(n, s, heads, causal, window, dilation=1, n_global=1):
    i, j = grid(n, s)
    in_window = ((i - j) % dilation == 0) & ((i - j).abs() < window * dilation)
    return (in_window | (j < n_global) | (i < n_global))[None]


def bigbird_pattern(n, s, heads, causal, block, n_global, n_random, seed, attention):
    """Window blocks and global tokens from the definition; the random keys are the layer's own draw."""
    i, j = grid(n, s)
    near = (j // block - i // block >= -1) & (j // block - i // block <= 1)
    base = near | (j < n_global) | (i < n_global)
    drawn = attention.random_keys(torch.arange(-(-n // block)), heads, s, causal)  # (H, blocks, r)
    pattern = base.repeat(heads, 1, 1)
    for h in range(heads):
        for query in range(n):
            keys = drawn[h, query // block]
            pattern[h, query, keys[keys >= 0]] = True
    return pattern


PATTERNS = {
    "sparse_fixed": (fixed_pattern, [{"block": 4, "summary": 1}, {"block": 5, "summary": 2},
                                     {"block": 3, "summary": 3}]),
    "sparse_strided": (strided_pattern, [{"stride": 1}, {"stride": 3}, {"stride": 5}]),
    "blockwise": (blockwise_pattern, [{"block": 4}, {"block": 5, "shifts": (0, 2, 1)}, {"block": 3, "shifts": (0,)}]),
    "axial": (axial_pattern, [{"width": 4}, {"width": 5}, {"width": 1}]),
    "longformer": (longformer_pattern, [{"window": 3}, {"window": 2, "dilation": 3, "n_global": 2},
                                        {"window": 4, "dilation": 2, "n_global": 0}]),
    "bigbird": (bigbird_pattern, [{"block": 3, "n_global": 1, "n_random": 2, "seed": 5},
                                  {"block": 4, "n_global": 0, "n_random": 3, "seed": 6},
                                  {"block": 2, "n_global": 2, "n_random": 1, "seed": 7}]),
}


def expected_pattern(name, attention, n, s, heads, causal, kwargs):
    extra = {"attention": attention} if name == "bigbird" else {}
    return PATTERNS[name][0](n, s, heads, causal, **kwargs, **extra)


def cases():
    return [(name, kwargs) for name, (_, settings) in PATTERNS.items() for kwargs in settings]


def padding_for(n: int) -> torch.Tensor:
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, n // 2 + 1 :] = True
    padding[0, 0] = n > 2
    return padding


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 7, 13, 24])
@pytest.mark.parametrize("name, kwargs", cases())
def test_pattern_matches_masked_softmax_forward_and_gradients(name, kwargs, n, causal):
    if not causal and n < kwargs.get("n_global", 0):
        pytest.skip("fewer positions than global tokens: refused, see test_more_global_tokens_than_keys_is_refused")
    attention = lintf.build_attention(name, head_dim=8, **kwargs)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n, heads=4))
    padding = padding_for(n)
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = masked_reference(q, k, v, expected_pattern(name, attention, n, n, 4, causal, kwargs), causal, padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), upstream)
    want = torch.autograd.grad(expected, (q, k, v), upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("n, s", [(5, 11), (11, 5), (3, 30)])
@pytest.mark.parametrize("name, kwargs", cases())
def test_cross_attention_compares_positions_by_index(name, kwargs, n, s):
    attention = lintf.build_attention(name, head_dim=8, **kwargs)
    q, k, v = (t.double() for t in random_qkv(n=n, s=s, heads=4))
    expected = masked_reference(q, k, v, expected_pattern(name, attention, n, s, 4, False, kwargs), False)
    torch.testing.assert_close(attention(q, k, v, causal=False), expected)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name, kwargs", cases())
def test_attended_keys_count_the_pattern(name, kwargs, causal):
    attention = lintf.build_attention(name, head_dim=8, **kwargs)
    pattern = expected_pattern(name, attention, 21, 21, 4, causal, kwargs)
    if causal:
        pattern = pattern & torch.ones(21, 21, dtype=torch.bool).tril()
    torch.testing.assert_close(attention.attended_keys(21, 4, causal), pattern.sum(-1).expand(4, -1))


@pytest.mark.parametrize("name, kwargs", cases())
def test_step_continues_a_long_prefix(name, kwargs):
    attention = lintf.build_attention(name, head_dim=8, **kwargs).double()
    q, k, v = (t.double() for t in random_qkv(n=40, heads=4))
    whole = attention(q, k, v, causal=True)
    _, state = attention(q[:, :, :31], k[:, :, :31], v[:, :, :31], causal=True, return_state=True)
    for t in range(31, 40):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        torch.testing.assert_close(out_t, whole[:, :, t])


def test_sparse_fixed_rejects_more_summary_columns_than_a_block_has():
    with pytest.raises(ValueError, match=r"summary=5 exceeds block=4.*summary <= 4"):
        lintf.build_attention("sparse_fixed", head_dim=8, block=4, summary=5)
    with pytest.raises(ValueError, match="block must be a positive int, got 0"):
        lintf.build_attention("sparse_fixed", head_dim=8, block=0)


@pytest.mark.parametrize("name", ["longformer", "bigbird"])
def test_more_global_tokens_than_keys_is_refused(name):
    attention = lintf.build_attention(name, head_dim=8, n_global=4)
    q, k, v = random_qkv(n=3)
    with pytest.raises(ValueError, match=rf"{name}: n_global=4 global tokens .* got S=3; use n_global <= 3"):
        attention(q, k, v, causal=False)
    assert torch.isfinite(attention(q, k, v, causal=True)).all()  # a causal prefix is all global: full attention


@pytest.mark.parametrize("causal", [True, False])
def test_bigbird_random_keys_are_distinct_keys_outside_the_window_and_globals(causal):
    attention = lintf.build_attention("bigbird", head_dim=8, block=4, n_global=2, n_random=3, seed=11)
    drawn = attention.random_keys(torch.arange(8), 3, 32, causal)  # (H, blocks, r)
    for head in range(3):
        for block in range(8):
            keys = drawn[head, block][drawn[head, block] >= 0].tolist()
            if causal:
                candidates = set(range(2, (block - 1) * 4))
            else:
                candidates = set(range(2, 32)) - set(range((block - 1) * 4, (block + 2) * 4))
            assert len(set(keys)) == len(keys) == min(3, len(candidates)) and set(keys) <= candidates
    assert not torch.equal(drawn[0], drawn[1])  # each head draws its own


def bigbird_with_seed(seed: int):
    return lintf.build_attention("bigbird", head_dim=8, block=4, n_random=3, seed=seed)


def test_bigbird_random_keys_depend_on_the_seed_not_on_the_length():
    build = bigbird_with_seed
    blocks = torch.arange(3, 10)
    short, long = build(1).random_keys(blocks, 2, 40, True), build(1).random_keys(blocks, 2, 4000, True)
    torch.testing.assert_close(short, long)  # a causal block's keys never change as the sequence grows
    assert not torch.equal(short, build(2).random_keys(blocks, 2, 40, True))


def test_bigbird_draws_a_seed_per_layer_and_keeps_it_in_the_state_dict():
    first, second = (lintf.build_attention("bigbird", head_dim=8, block=2, n_random=2) for _ in range(2))
    assert int(first.seed) != int(second.seed)
    q, k, v = random_qkv(n=20)
    assert not torch.allclose(first(q, k, v, causal=True), second(q, k, v, causal=True))
    second.load_state_dict(first.state_dict())
    torch.testing.assert_close(second(q, k, v, causal=True), first(q, k, v, causal=True))


@pytest.mark.parametrize("kwargs, message", [
    ({"shifts": [1, 0]}, r"shifts must be a non-empty list of ints >= 0 whose first is 0 .* got \(1, 0\)"),
    ({"shifts": []}, "shifts must be a non-empty list"),
    ({"block": -2}, "block must be a positive int, got -2"),
])
def test_blockwise_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lintf.build_attention("blockwise", head_dim=8, **kwargs)


@pytest.mark.parametrize("name, kwargs, message", [
    ("sparse_strided", {"stride": 0}, "stride must be a positive int, got 0"),
    ("axial", {"width": 2.5}, "width must be a positive int, got 2.5"),
    ("longformer", {"dilation": 0}, "dilation must be a positive int, got 0"),
    ("longformer", {"n_global": -1}, "n_global must be an int >= 0"),
    ("bigbird", {"n_random": -1}, "n_random must be an int >= 0"),
    ("bigbird", {"seed": -3}, "seed must be an int >= 0 or None"),
])
def test_bad_pattern_sizes_name_the_argument(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        lintf.build_attention(name, head_dim=8, **kwargs)


def test_axial_with_one_head_attends_along_rows_only():
    attention = lintf.build_attention("axial", head_dim=8, width=4)
    q, k, v = (t.double() for t in random_qkv(n=10, heads=1))
    expected = masked_reference(q, k, v, axial_pattern(10, 10, 1, True, width=4), True)
    torch.testing.assert_close(attention(q, k, v, causal=True), expected)


@pytest.mark.parametrize("name, kwargs", [(name, settings[0]) for name, (_, settings) in PATTERNS.items()])
def test_queries_over_no_key_give_zeros(name, kwargs):
    kwargs = {**kwargs, **({"n_global": 0} if name in ("longformer", "bigbird") else {})}  # S >= n_global
    attention = lintf.build_attention(name, head_dim=8, **kwargs)
    q, k, v = random_qkv(n=5, s=0)
    out = attention(q, k, v, causal=False, key_padding_mask=torch.zeros(2, 0, dtype=torch.bool))
    assert torch.equal(out, torch.zeros(2, 3, 5, 5))
