"""Mismatched inputs raise ValueErrors that name the offending values."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention

pytestmark = pytest.mark.usefixtures("compiled_op")


def good() -> list[torch.Tensor]:
    return [torch.rand(1, 2, 5, 3), torch.rand(1, 2, 5, 3), torch.rand(1, 2, 5, 4)]


@pytest.mark.parametrize("fn", [causal_linear_attention, causal_dot_product])
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: [t[0][0], t[1], t[2]], r"q must be 4-D \(B, H, N, features\), got shape \(2, 5, 3\)"),
        (lambda t: [t[0], t[1][..., :2], t[2]], r"q and k must have the same shape .* \(1, 2, 5, 3\) and \(1, 2, 5, 2\)"),
        (lambda t: [t[0], t[1], t[2][:, :, :4]], r"v must be \(B, H, N, M\) with \(B, H, N\) = \(1, 2, 5\)"),
        (lambda t: [t[0], t[1].double(), t[2]], r"must share a dtype, got torch.float32, torch.float64"),
        (lambda t: [t[0], t[1], t[2].int()], r"v has dtype torch.int32; allowed: torch.float16"),
        (lambda t: [t[0], t[1], t[2].to("meta")], r"must be on one device, got cpu, cpu, meta"),
    ],
    ids=["rank", "qk-shape", "v-shape", "dtype", "int-dtype", "device"],
)
def test_invalid_inputs_raise_value_error(fn, change, message):
    with pytest.raises(ValueError, match=message):
        fn(*change(good()))


def test_the_raw_op_checks_too():
    q, k, v = good()
    with pytest.raises(RuntimeError, match="q and k must have the same shape"):
        torch.ops.lintf.causal_product(q, k[..., :2], v, 1e-6, True)
    with pytest.raises(RuntimeError, match="must share a dtype"):
        torch.ops.lintf.causal_product(q, k.double(), v, 1e-6, True)


def good_state() -> LinearAttentionState:
    return LinearAttentionState(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3))


@pytest.mark.parametrize("fn", [causal_linear_attention, causal_dot_product])
@pytest.mark.parametrize(
    "state, message",
    [
        (LinearAttentionState(torch.zeros(1, 2, 4, 3), torch.zeros(1, 2, 3)),
         r"initial_state.kv must have shape \(1, 2, 3, 4\) \(B, H, C, M\), got \(1, 2, 4, 3\)"),
        (LinearAttentionState(torch.zeros(1, 2, 3, 4), torch.zeros(2, 3)),
         r"initial_state.normaliser must have shape \(1, 2, 3\) \(B, H, C\), got \(2, 3\)"),
        (LinearAttentionState(torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 3)),
         r"initial_state.kv must have the accumulation dtype torch.float32 \(for torch.float32 inputs\), "
         r"got torch.bfloat16"),
        (LinearAttentionState(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, device="meta")),
         r"initial_state.normaliser must be on the inputs' device cpu, got meta"),
        (torch.zeros(1, 2, 3, 4), r"initial_state must be a LinearAttentionState\(kv, normaliser\) .* got Tensor"),
    ],
    ids=["kv-shape", "normaliser-shape", "dtype", "device", "type"],
)
def test_invalid_state_raises_value_error(fn, state, message):
    with pytest.raises(ValueError, match=message):
        fn(*good(), initial_state=state)


def test_fp64_inputs_need_an_fp64_state():
    q, k, v = (t.double() for t in good())
    with pytest.raises(ValueError, match=r"accumulation dtype torch.float64 \(for torch.float64 inputs\)"):
        causal_linear_attention(q, k, v, initial_state=good_state())


def test_the_raw_op_checks_the_state():
    q, k, v = good()
    kv, z = good_state()
    with pytest.raises(RuntimeError, match=r"initial state kv must have shape \[1, 2, 3, 4\], got \[1, 2, 3, 3\]"):
        torch.ops.lintf.causal_product(q, k, v, 1e-6, True, kv[..., :3], z)
    with pytest.raises(RuntimeError, match=r"initial state normaliser must have dtype Double"):
        torch.ops.lintf.causal_product(q.double(), k.double(), v.double(), 1e-6, True, kv.double(), z)
