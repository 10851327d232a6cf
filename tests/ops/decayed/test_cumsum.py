"""The decayed prefix sum (AFT's running softmax) against the step-by-step recurrence."""

from __future__ import annotations

import pytest
import torch

from lintf.ops.decayed.cumsum import decayed_cumsum
from lintf.ops.decayed.reference import decayed_cumsum_reference, decayed_dot_product_reference
from tests.ops.decayed.test_product import inputs


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_decayed_cumsum_matches_recurrence_forward_and_gradients(n):
    x = torch.randn(2, 3, n, 4, 2, dtype=torch.float64, requires_grad=True)
    log_decay = (-2 * torch.rand(2, 3, n, 4, 1, dtype=torch.float64)).requires_grad_()  # broadcast over the last dim
    got, want = decayed_cumsum(x, log_decay), decayed_cumsum_reference(x, log_decay)
    torch.testing.assert_close(got, want)
    upstream = torch.randn_like(got)
    got_grads = torch.autograd.grad(got, (x, log_decay), upstream, allow_unused=True)
    for a, b in zip(got_grads, torch.autograd.grad(want, (x, log_decay), upstream)):
        torch.testing.assert_close(torch.zeros_like(b) if a is None else a, b)  # log_decay_0 decays nothing


def test_decayed_cumsum_is_the_decayed_product_with_one_feature():
    q, k, v, log_decay = inputs(19, c=1, m=1)
    expected = decayed_dot_product_reference(torch.ones_like(q), k, v, log_decay)
    torch.testing.assert_close(decayed_cumsum(k * v, log_decay.unsqueeze(-1)), expected)


def test_decayed_cumsum_with_strong_decays_is_finite():
    x = torch.randn(1, 2, 300, 3)
    log_decay = -80 * torch.rand(1, 2, 300, 3)
    got = decayed_cumsum(x, log_decay)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), decayed_cumsum_reference(x.double(), log_decay.double()), atol=1e-5, rtol=1e-5)


def test_decayed_cumsum_rejects_bad_inputs():
    x = torch.randn(2, 3, 5, 4)
    with pytest.raises(ValueError, match="log_decay must be <= 0"):
        decayed_cumsum(x, torch.ones(2, 3, 5, 4))
    with pytest.raises(ValueError, match=r"must broadcast to x \(2, 3, 5, 4\)"):
        decayed_cumsum(x, -torch.ones(2, 3, 5, 2))
    with pytest.raises(ValueError, match="as many dims and the same N"):
        decayed_cumsum(x, -torch.ones(2, 3, 4, 4))
