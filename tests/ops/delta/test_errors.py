"""Bad arguments of the delta rule and GLA: one ValueError naming the tensor, its shape and the expected one."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import delta_rule, gated_linear_attention


def tensors(n: int = 6, c: int = 4, m: int = 3):
    q, k, v = torch.randn(2, 3, n, c), torch.randn(2, 3, n, c), torch.randn(2, 3, n, m)
    return q, k, v, torch.rand(2, 3, n), -torch.rand(2, 3, n), -torch.rand(2, 3, n, c)


@pytest.mark.parametrize("change, message", [
    (dict(beta=torch.rand(2, 3, 5)), r"beta must be a float tensor \(B, H, N\) = \(2, 3, 6\) .* got shape \(2, 3, 5\)"),
    (dict(beta=torch.full((2, 3, 6), 2.5)), r"beta must be in \[0, 2\] .* got values from 2.5 to 2.5"),
    (dict(beta=torch.full((2, 3, 6), -0.1)), r"beta must be in \[0, 2\]"),
    (dict(log_decay=torch.full((2, 3, 6), 0.5)), r"log_decay must be <= 0"),
    (dict(log_decay=torch.zeros(2, 3, 6, 4)), r"log_decay must be a float tensor \(B, H, N\) = \(2, 3, 6\)"),
    (dict(initial_state=torch.zeros(2, 3, 3, 4)), r"initial_state must have shape \(B, H, C, M\) = \(2, 3, 4, 3\)"),
    (dict(initial_state=torch.zeros(2, 3, 4, 3, dtype=torch.float64)), r"initial_state must have the accumulation"),
    (dict(v=torch.randn(2, 3, 5, 3)), r"q, k \(B, H, N, C\) and v \(B, H, N, M\) with the same B, H, N"),
    (dict(scale=float("nan")), r"scale must be a finite number"),
])
def test_delta_rule_refuses(change, message):
    q, k, v, beta, log_decay, _ = tensors()
    arguments = dict(q=q, k=k, v=v, beta=beta, log_decay=log_decay) | change
    with pytest.raises(ValueError, match=message):
        delta_rule(**arguments)


@pytest.mark.parametrize("change, message", [
    (dict(log_gate=-torch.rand(2, 3, 6)), r"log_gate must be a float tensor \(B, H, N, C\) = \(2, 3, 6, 4\)"),
    (dict(log_gate=torch.full((2, 3, 6, 4), 0.1)), r"log_gate must be <= 0"),
    (dict(initial_state=torch.zeros(2, 3, 4)), r"initial_state must have shape \(B, H, C, M\)"),
    (dict(q=torch.randn(2, 3, 6)), r"q must be a 4-D float tensor"),
])
def test_gated_linear_attention_refuses(change, message):
    q, k, v, _, _, log_gate = tensors()
    arguments = dict(q=q, k=k, v=v, log_gate=log_gate) | change
    with pytest.raises(ValueError, match=message):
        gated_linear_attention(**arguments)
