"""What each kind of state holds: recurrent sums, KV caches, local's window, reformer's hashed cache."""

from __future__ import annotations

import pytest
import torch

import lintf
from tests.attention.stepping import step_through
from tests.conftest import qkv_for, random_qkv, run_seeded

TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def elu_plus_one(x):
    return torch.where(x > 0, x + 1, torch.exp(x))


def test_linear_state_is_the_sum_of_feature_mapped_keys_times_values():
    attention = lintf.build_attention("linear", head_dim=8)
    q, k, v = (t.double() for t in random_qkv(n=9, m=4))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, 4:] = True
    _, state = attention(q, k, v, causal=True, key_padding_mask=padding, return_state=True)
    phi_k = elu_plus_one(k) * ~padding[:, None, :, None]  # (B, H, N, D), padded keys excluded
    torch.testing.assert_close(state.kv, phi_k.transpose(-1, -2) @ v, **TIGHT)
    torch.testing.assert_close(state.normaliser, phi_k.sum(2), **TIGHT)


@pytest.mark.parametrize("name", ["linear", "polynomial", "retention", "gated_linear", "aft", "softmax", "topk"])
def test_a_fully_padded_piece_leaves_the_state_unchanged_in_effect(name):
    """For attentions where padded keys are absent, padding adds nothing: continuing after it
    gives what continuing before it gives."""
    attention = lintf.build_attention(name, head_dim=8).double().eval()
    q, k, v = (t.double() for t in qkv_for(attention, n=20))
    _, state = attention(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True, return_state=True)
    all_padded = torch.ones(2, 5, dtype=torch.bool)
    _, padded_state = attention(
        q[:, :, 8:13], k[:, :, 8:13], v[:, :, 8:13], causal=True, key_padding_mask=all_padded, state=state,
        return_state=True,
    )
    rest = (q[:, :, 13:], k[:, :, 13:], v[:, :, 13:])
    torch.testing.assert_close(
        attention(*rest, causal=True, state=padded_state), attention(*rest, causal=True, state=state), **TIGHT
    )


def test_local_window_counts_padded_positions_and_stays_window_sized():
    attention = lintf.build_attention("local", head_dim=8, window=3).double()
    q, k, v = (t.double() for t in random_qkv(n=40))
    _, state = attention(q[:, :, :30], k[:, :, :30], v[:, :, :30], causal=True, return_state=True)
    assert state.keys.shape[2] == 3 and state.values.shape[2] == 3  # O(w), however long the prefix
    all_padded = torch.ones(2, 3, dtype=torch.bool)
    _, state = attention(
        q[:, :, 30:33], k[:, :, 30:33], v[:, :, 30:33], causal=True, key_padding_mask=all_padded, state=state,
        return_state=True,
    )
    rest = (q[:, :, 33:], k[:, :, 33:], v[:, :, 33:])
    # three padded positions fill the window: the continuation sees no key from before them
    torch.testing.assert_close(attention(*rest, causal=True, state=state), attention(*rest, causal=True), **TIGHT)


@pytest.mark.parametrize("split", [0, 1, 9, 19, 20])
def test_reformer_in_one_chunk_continues_exactly(split):
    """With chunk_size >= N every query sees all earlier keys of its buckets: forward, step and any
    split agree when the rotations are the same (drawn from one seed)."""
    attention = lintf.build_attention("reformer", head_dim=8, n_buckets=4, n_hashes=2, chunk_size=32).double()
    q, _, v = (t.double() for t in random_qkv(n=20))
    inputs = (q, q, v)
    whole = run_seeded(attention, *inputs, causal=True)
    first, state = run_seeded(attention, *(t[:, :, :split] for t in inputs), causal=True, return_state=True)
    rest = attention(*(t[:, :, split:] for t in inputs), causal=True, state=state)
    torch.testing.assert_close(torch.cat([first, rest], dim=2), whole, **TIGHT)
    stepped, _ = step_through(attention, *(t[:, :, split:] for t in inputs), state)
    torch.testing.assert_close(torch.cat([first, stepped], dim=2), whole, **TIGHT)


def test_reformer_continuation_lays_out_chunks_as_the_whole_forward():
    """Many chunks: the prefix's own outputs may differ from the whole's, the continuation's do not."""
    attention = lintf.build_attention("reformer", head_dim=8, n_buckets=4, n_hashes=2, chunk_size=4).double()
    q, _, v = (t.double() for t in random_qkv(n=30))
    padding = torch.zeros(2, 30, dtype=torch.bool)
    padding[1, 5:9] = True
    whole = run_seeded(attention, q, q, v, causal=True, key_padding_mask=padding)
    _, state = run_seeded(
        attention, q[:, :, :13], q[:, :, :13], v[:, :, :13], causal=True, key_padding_mask=padding[:, :13],
        return_state=True,
    )
    rest = attention(
        q[:, :, 13:], q[:, :, 13:], v[:, :, 13:], causal=True, key_padding_mask=padding[:, 13:], state=state
    )
    torch.testing.assert_close(rest, whole[:, :, 13:], **TIGHT)


def test_random_features_are_not_redrawn_inside_a_sequence():
    attention = lintf.build_attention(
        "linear", head_dim=8, feature_map="favor", feature_map_kwargs={"n_features": 16, "redraw_every": 1}
    ).double()
    q, k, v = (t.double() for t in random_qkv(n=12))
    attention.train()
    first, state = attention(q[:, :, :5], k[:, :, :5], v[:, :, :5], causal=True, return_state=True)
    drawn = attention.feature_map.projection.clone()
    rest = attention(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], causal=True, state=state)
    torch.testing.assert_close(attention.feature_map.projection, drawn)  # the continuation kept the features
    attention.eval()
    torch.testing.assert_close(torch.cat([first, rest], dim=2), attention(q, k, v, causal=True), **TIGHT)
    attention.train()
    attention(q, k, v, causal=True)  # a new sequence draws new features
    assert not torch.equal(attention.feature_map.projection, drawn)
