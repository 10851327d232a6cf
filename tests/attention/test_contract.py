"""The contract of attention/base.py, checked for every registered attention (plugins included)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import (
    HEAD_DIM,
    attention_names,
    build,
    causal_attention_names,
    exact_step_attention_names,
    non_causal_only_attention_names,
    qkv_for,
    random_qkv,
    run_seeded,
)


def build_for(name: str, causal: bool):
    """The attention, or a skip for causal=True on a non-causal-only attention (tested separately)."""
    attention = build(name)
    if causal and not attention.supports_causal:
        pytest.skip(f"{name} is non-causal only")
    return attention


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("causal", [True, False])
def test_output_shape_and_dtype(name, causal):
    attention = build_for(name, causal)
    q, k, v = qkv_for(attention, n=12, m=5)
    out = run_seeded(attention, q, k, v, causal=causal)
    assert out.shape == (2, 3, 12, v.shape[-1]) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", attention_names())
def test_cross_attention_with_more_keys_than_queries(name):
    attention = build(name)
    if attention.shares_query_key or attention.self_attention_only:
        pytest.skip(f"{name} puts queries and keys in one sequence, so N must equal S")
    q, k, v = qkv_for(attention, n=4, s=9, m=5)
    assert attention(q, k, v, causal=False).shape == (2, 3, 4, v.shape[-1])


@pytest.mark.parametrize("name", causal_attention_names())
def test_causal_outputs_ignore_the_future(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=16)
    t = 9
    changed_q, changed_k, changed_v = q.clone(), k.clone(), v.clone()
    changed_v[:, :, t + 1 :] = torch.randn_like(v[:, :, t + 1 :])
    if not attention.shares_query_key:  # LSH layouts depend on every query, so only v may change
        changed_q[:, :, t + 1 :] = torch.randn_like(q[:, :, t + 1 :])
        changed_k[:, :, t + 1 :] = torch.randn_like(k[:, :, t + 1 :])
    before = run_seeded(attention, q, k, v, causal=True)
    after = run_seeded(attention, changed_q, changed_k, changed_v, causal=True)
    torch.testing.assert_close(after[:, :, : t + 1], before[:, :, : t + 1])
    assert not torch.allclose(after[:, :, t + 1 :], before[:, :, t + 1 :])


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("causal", [True, False])
def test_gradients_reach_inputs(name, causal):
    attention = build_for(name, causal)
    q, k, v = (t.requires_grad_() for t in qkv_for(attention, n=10))
    run_seeded(attention, q, k, v, causal=causal).square().sum().backward()
    expected = (q, v) if attention.shares_query_key else (q, k, v)
    for tensor in expected:
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0
    if attention.shares_query_key:
        assert k.grad is None or not k.grad.any()


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("causal", [True, False])
def test_padded_keys_contribute_nothing(name, causal):
    attention = build_for(name, causal)
    q, k, v = qkv_for(attention, n=12)
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[0, 8:] = True
    padding[1, 5:] = True
    changed_k, changed_v = k.clone(), v.clone()
    changed_v[padding[:, None, :].expand(-1, 3, -1)] = 100.0
    if not attention.shares_query_key:
        changed_k[padding[:, None, :].expand(-1, 3, -1)] = 3.0
    before = run_seeded(attention, q, k, v, causal=causal, key_padding_mask=padding)
    after = run_seeded(attention, q, changed_k, changed_v, causal=causal, key_padding_mask=padding)
    valid = ~padding[:, None, :, None]  # outputs at padded query positions are free to differ
    torch.testing.assert_close(after.masked_fill(~valid, 0), before.masked_fill(~valid, 0))


@pytest.mark.parametrize("name", attention_names())
def test_bf16_autocast_stays_close_to_fp32(name):
    attention = build(name)
    causal = attention.supports_causal
    q, k, v = (t.bfloat16() for t in qkv_for(attention, n=16))
    reference = run_seeded(attention, q.float(), k.float(), v.float(), causal=causal)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = run_seeded(attention, q, k, v, causal=causal)
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), reference, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("name", exact_step_attention_names())
def test_step_reproduces_causal_forward(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=14, m=6)
    parallel = attention(q, k, v, causal=True)
    state = attention.init_state(2, 3, v.shape[-1])
    outputs = []
    for t in range(14):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), parallel, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", causal_attention_names())
def test_step_shapes(name):
    attention = build(name)
    m = HEAD_DIM if attention.value_dim_is_head_dim else 6
    state = attention.init_state(2, 3, m)
    q_t, k_t, v_t = torch.randn(2, 3, HEAD_DIM), torch.randn(2, 3, HEAD_DIM), torch.randn(2, 3, m)
    for _ in range(40):  # more steps than any initial cache capacity or window
        out_t, state = attention.step(q_t, k_t, v_t, state)
    assert out_t.shape == (2, 3, m) and torch.isfinite(out_t).all()


@pytest.mark.parametrize("name", attention_names())
def test_bad_inputs_raise_clear_errors(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=6)
    with pytest.raises(ValueError, match=r"q must be a 4-D float tensor .*got shape \(3, 6, 8\)"):
        attention(q[0], k, v, causal=True)
    with pytest.raises(ValueError, match=rf"expected q \(B, H, N, {HEAD_DIM}\)"):
        attention(q[..., :4], k[..., :4], v, causal=True)
    with pytest.raises(ValueError, match="v must be"):
        attention(q, k, v[:, :, :4], causal=True)
    with pytest.raises(ValueError, match="needs as many queries as keys, got N=3, S=6"):
        attention(q[:, :, :3], k, v, causal=True)
    with pytest.raises(ValueError, match="share dtype and device"):
        attention(q.double(), k, v, causal=True)
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool tensor \(B, S\) = \(2, 6\)"):
        attention(q, k, v, causal=True, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must be a bool tensor"):
        attention(q, k, v, causal=True, key_padding_mask=torch.zeros(2, 6))
    if not attention.supports_causal:
        return  # no step: see test_non_causal_only_attention_rejects_causal_use
    state = attention.init_state(2, 3, v.shape[-1])
    with pytest.raises(ValueError, match=r"step: expected q_t, k_t \(B, H, 8\)"):
        attention.step(q[:, :, 0, :4], k[:, :, 0, :4], v[:, :, 0], state)
    with pytest.raises(ValueError, match="q_t must be a 3-D float tensor"):
        attention.step(q[:, :, 0:1], k[:, :, 0], v[:, :, 0], state)


@pytest.mark.parametrize("name", attention_names())
def test_bad_head_dim_is_rejected(name):
    with pytest.raises(ValueError, match="head_dim must be a positive int"):
        build(name, head_dim=0)


@pytest.mark.parametrize("name", causal_attention_names())
def test_query_that_sees_no_key_returns_zeros(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=8)
    padding = torch.zeros(2, 8, dtype=torch.bool)
    padding[0, :3] = True  # left padding: causal queries 0..2 of sequence 0 see no valid key
    out = run_seeded(attention, q, k, v, causal=True, key_padding_mask=padding)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, :, :3], torch.zeros_like(out[0, :, :3]))


@pytest.mark.parametrize("name", attention_names())
def test_fully_padded_sequence_returns_zeros_without_causality(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=8)
    padding = torch.zeros(2, 8, dtype=torch.bool)
    padding[0] = True  # sequence 0 has no key at all
    out = run_seeded(attention, q, k, v, causal=False, key_padding_mask=padding)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], torch.zeros_like(out[0]))
    assert out[1].abs().sum() > 0


@pytest.mark.parametrize("name", non_causal_only_attention_names())
def test_non_causal_only_attention_rejects_causal_use(name):
    attention = build(name)
    assert not attention.step_matches_forward
    q, k, v = qkv_for(attention, n=6)
    message = rf"{name} attention is non-causal only.*causal attention: .*linear"
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match=message):
        attention.init_state(2, 3, 5)
    with pytest.raises(ValueError, match=message):
        attention.step(q[:, :, 0], k[:, :, 0], v[:, :, 0], {})


@pytest.mark.parametrize("name", [n for n in attention_names() if build(n).self_attention_only])
def test_self_attention_only_rejects_other_key_lengths(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=4, s=9)
    with pytest.raises(ValueError, match=r"self-attention \(queries and keys share positions\) needs as many"):
        attention(q, k, v, causal=False)


@pytest.mark.parametrize("name", [n for n in attention_names() if build(n).value_dim_is_head_dim])
def test_element_wise_attention_rejects_other_value_sizes(name):
    attention = build(name)
    q, k, v = random_qkv(n=5, m=HEAD_DIM + 1)
    with pytest.raises(ValueError, match=rf"values must have the head size M = D = {HEAD_DIM}"):
        attention(q, k, v, causal=False)
    if attention.supports_causal:
        state = attention.init_state(2, 3, HEAD_DIM)
        with pytest.raises(ValueError, match=rf"v_t must have the head size M = D = {HEAD_DIM}"):
            attention.step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
