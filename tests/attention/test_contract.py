"""The contract of attention/base.py, checked for every registered attention (plugins included)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import HEAD_DIM, attention_names, build, exact_step_attention_names, random_qkv, run_seeded


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("causal", [True, False])
def test_output_shape_and_dtype(name, causal):
    attention = build(name)
    q, k, v = random_qkv(n=12, m=5)
    out = run_seeded(attention, q, k, v, causal=causal)
    assert out.shape == (2, 3, 12, 5) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", attention_names())
def test_cross_attention_with_more_keys_than_queries(name):
    attention = build(name)
    if attention.shares_query_key:
        pytest.skip(f"{name} derives keys from queries, so N must equal S")
    q, k, v = random_qkv(n=4, s=9, m=5)
    assert attention(q, k, v, causal=False).shape == (2, 3, 4, 5)


@pytest.mark.parametrize("name", attention_names())
def test_causal_outputs_ignore_the_future(name):
    attention = build(name)
    q, k, v = random_qkv(n=16)
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
    attention = build(name)
    q, k, v = (t.requires_grad_() for t in random_qkv(n=10))
    run_seeded(attention, q, k, v, causal=causal).square().sum().backward()
    expected = (q, v) if attention.shares_query_key else (q, k, v)
    for tensor in expected:
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0
    if attention.shares_query_key:
        assert k.grad is None or not k.grad.any()


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("causal", [True, False])
def test_padded_keys_contribute_nothing(name, causal):
    attention = build(name)
    q, k, v = random_qkv(n=12)
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
    q, k, v = (t.bfloat16() for t in random_qkv(n=16))
    reference = run_seeded(attention, q.float(), k.float(), v.float(), causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = run_seeded(attention, q, k, v, causal=True)
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), reference, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("name", exact_step_attention_names())
def test_step_reproduces_causal_forward(name):
    attention = build(name)
    q, k, v = random_qkv(n=14, m=6)
    parallel = attention(q, k, v, causal=True)
    state = attention.init_state(2, 3, 6)
    outputs = []
    for t in range(14):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), parallel, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", attention_names())
def test_step_shapes(name):
    attention = build(name)
    state = attention.init_state(2, 3, 6)
    q_t, k_t, v_t = torch.randn(2, 3, HEAD_DIM), torch.randn(2, 3, HEAD_DIM), torch.randn(2, 3, 6)
    for _ in range(20):  # more steps than any initial cache capacity
        out_t, state = attention.step(q_t, k_t, v_t, state)
    assert out_t.shape == (2, 3, 6) and torch.isfinite(out_t).all()


@pytest.mark.parametrize("name", attention_names())
def test_bad_inputs_raise_clear_errors(name):
    attention = build(name)
    q, k, v = random_qkv(n=6)
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
    with pytest.raises(ValueError, match=r"step: expected q_t, k_t \(B, H, 8\)"):
        attention.step(q[:, :, 0, :4], k[:, :, 0, :4], v[:, :, 0], attention.init_state(2, 3, 5))
    with pytest.raises(ValueError, match="q_t must be a 3-D float tensor"):
        attention.step(q[:, :, 0:1], k[:, :, 0], v[:, :, 0], attention.init_state(2, 3, 5))


@pytest.mark.parametrize("name", attention_names())
def test_bad_head_dim_is_rejected(name):
    with pytest.raises(ValueError, match="head_dim must be a positive int"):
        build(name, head_dim=0)


@pytest.mark.parametrize("name", attention_names())
def test_query_that_sees_no_key_returns_zeros(name):
    attention = build(name)
    q, k, v = random_qkv(n=8)
    padding = torch.zeros(2, 8, dtype=torch.bool)
    padding[0, :3] = True  # left padding: causal queries 0..2 of sequence 0 see no valid key
    out = run_seeded(attention, q, k, v, causal=True, key_padding_mask=padding)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, :, :3], torch.zeros_like(out[0, :, :3]))
