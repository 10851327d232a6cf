"""Linear attention specifics: fp32 accumulation of the RNN state under reduced precision."""

from __future__ import annotations

import torch

import lintf


def test_state_and_normaliser_stay_fp32_for_bf16_inputs():
    attention = lintf.build_attention("linear", head_dim=8)
    state = attention.init_state(2, 3, 5, dtype=torch.bfloat16)
    q_t, k_t, v_t = (torch.randn(2, 3, d).bfloat16() for d in (8, 8, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            out_t, state = attention.step(q_t, k_t, v_t, state)
    assert state.kv.dtype == torch.float32 and state.normaliser.dtype == torch.float32
    assert out_t.dtype == torch.bfloat16


def test_long_bf16_sequence_does_not_saturate_the_normaliser():
    """bf16 has 8 mantissa bits: a bf16 running sum of ~N ones would stop growing at 256."""
    attention = lintf.build_attention("linear", head_dim=4)
    n = 4096
    q = torch.zeros(1, 1, n, 4, dtype=torch.bfloat16)  # elu(0) + 1 = 1: every weight is 1
    v = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1).expand(1, 1, n, 1) / n
    out = attention(q, q, v.bfloat16(), causal=True)
    expected = torch.cumsum(v.bfloat16().float(), dim=2) / torch.arange(1, n + 1).view(1, 1, n, 1)  # running mean
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
