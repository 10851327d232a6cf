"""The chunk states the compiled decayed product keeps for its backward (LINTF_CPU_BACKWARD).

The gradients with kept states are checked against the references in test_compiled.py (its
``backward_mode`` fixture); here: which forward keeps them, and that they are the right states.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops.decayed import compiled as decayed_compiled
from lintf.ops.decayed.reference import decayed_recurrence_reference


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not decayed_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled decayed product is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


def expanded_inputs(n: int, c: int, m: int, requires_grad: bool = True) -> list[torch.Tensor]:
    """fp32 CPU q, k (1, 8, N, C), v (1, 8, N, M), log_decay (1, 8, N), each one element expanded (no memory)."""
    shapes = [(1, 8, n, c), (1, 8, n, c), (1, 8, n, m), (1, 8, n)]
    return [torch.zeros((), requires_grad=requires_grad).expand(shape) for shape in shapes]


@pytest.mark.parametrize("mode, features, requires_grad, keeps", [
    ("auto", 64, True, False),  # 1/12 of q, k, v, log_decay's bytes, but auto keeps none (AUTO_STATE_SHARE)
    ("auto", 256, True, False),  # 1/3 of them
    ("stored", 64, True, True),  # states every 256 positions
    ("stored", 256, True, True),
    ("recompute", 64, True, False),
    ("auto", 64, False, False),  # no backward follows
    ("stored", 64, False, False),
])
def test_the_forward_keeps_states_when_the_mode_and_budget_allow(monkeypatch, mode, features, requires_grad, keeps):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    q, k, v, log_decay = expanded_inputs(4096, features, features, requires_grad)
    assert decayed_compiled.keeps_chunk_states(q, k, v, log_decay, None) == keeps


def test_kept_states_are_the_states_entering_each_span():
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 200, 5, dtype=torch.float64, generator=generator) for _ in range(2))
    v = torch.randn(2, 3, 200, 4, dtype=torch.float64, generator=generator)
    log_decay = -torch.rand(2, 3, 200, dtype=torch.float64, generator=generator)
    start = torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=generator)
    _, _, states = torch.ops.lintf.decayed_product(q, k, v, log_decay, start, 64)
    assert states.shape == (2, 3, 4, 5, 4)  # spans starting at 0, 64, 128, 192
    torch.testing.assert_close(states[:, :, 0], start)
    for span in range(1, 4):
        end = 64 * span
        _, want = decayed_recurrence_reference(q[:, :, :end], k[:, :, :end], v[:, :, :end], log_decay[:, :, :end], start)
        torch.testing.assert_close(states[:, :, span], want)


def test_spacing_and_states_are_checked():
    q, k, v = torch.randn(1, 1, 40, 3), torch.randn(1, 1, 40, 3), torch.randn(1, 1, 40, 2)
    log_decay = -torch.rand(1, 1, 40)
    with pytest.raises(RuntimeError, match="state_spacing must be 0 .* or a positive multiple of 32, got 48"):
        torch.ops.lintf.decayed_product(q, k, v, log_decay, None, 48)
    _, _, states = torch.ops.lintf.decayed_product(q, k, v, log_decay, None, 32)
    with pytest.raises(RuntimeError, match=r"chunk_states must be \(B, H, ceil\(N / state_spacing\), C, M\)"):
        torch.ops.lintf.decayed_product_backward(v, q, k, v, log_decay, None, None, states, 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_keeping_states(dtype):
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 70, 4, dtype=dtype, generator=generator, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 2, 70, 3, dtype=dtype, generator=generator, requires_grad=True)
    log_decay = (-torch.rand(1, 2, 70, dtype=dtype, generator=generator)).requires_grad_()
    torch.library.opcheck(torch.ops.lintf.decayed_product.default, (q, k, v, log_decay, None, 32))
