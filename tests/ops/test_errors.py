"""Mismatched inputs raise ValueErrors that name the offending values."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import causal_dot_product, causal_linear_attention

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
