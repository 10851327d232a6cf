"""The states the CPU forward keeps for its backward (LINTF_CPU_BACKWARD): when they are kept, what they hold,
and that the backward computes from them.

The gradients themselves are checked in both modes by the tests that use the ``backward_mode`` fixture
(test_product.py, test_state.py, test_cpu_paths.py).
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops.causal import compiled
from lintf.ops.causal.reference import final_state_reference

pytestmark = pytest.mark.usefixtures("compiled_op")


def qkv(n: int, c: int, m: int, requires_grad: bool = True) -> list[torch.Tensor]:
    tensors = [torch.rand(1, 2, n, c), torch.rand(1, 2, n, c), torch.randn(1, 2, n, m)]
    return [t.requires_grad_(requires_grad) for t in tensors]


@pytest.mark.parametrize("c, m, kept", [(64, 64, True), (32, 32, True), (128, 128, False)])
def test_auto_keeps_states_within_an_eighth_of_the_inputs(c, m, kept, monkeypatch):
    """One state of C * (M + 1) numbers per span against span * (2C + M) input numbers, with a 1 MiB L2: spans of
    256 positions at C = M = 64, 512 at 32, 128 at 128."""
    monkeypatch.delenv("LINTF_CPU_BACKWARD", raising=False)
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "32,1024,32768")
    q, k, v = qkv(512, c, m)
    share = compiled.kept_state_bytes(q, v) / sum(t.numel() * t.element_size() for t in (q, k, v))
    assert (share <= 1 / 8) == kept
    assert compiled.states_every(q, k, v, None) == (compiled.span_of(q, v) if kept else 0)


@pytest.mark.parametrize("mode", ["stored", "recompute"])
def test_forced_modes_ignore_the_budget(mode, monkeypatch):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    q, k, v = qkv(512, 128, 128)
    assert compiled.states_every(q, k, v, None) == (compiled.span_of(q, v) if mode == "stored" else 0)


def test_no_states_are_kept_without_a_backward(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", "stored")
    q, k, v = qkv(512, 16, 16)
    assert compiled.states_every(*qkv(512, 16, 16, requires_grad=False), None) == 0
    with torch.no_grad():
        assert compiled.states_every(q, k, v, None) == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_kept_states_are_the_states_entering_each_span(threads):
    q, k, v = (t.detach().double() for t in qkv(300, 5, 3))
    kv0, z0 = torch.randn(1, 2, 5, 3, dtype=torch.float64), torch.rand(1, 2, 5, dtype=torch.float64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        *_, kept = torch.ops.lintf.causal_product(q, k, v, 1e-6, True, kv0, z0, 64)
    finally:
        torch.set_num_threads(before)
    assert kept.shape == (1, 2, 5, 5 * 3 + 5)
    for span in range(5):
        kv, z = final_state_reference(k[:, :, : 64 * span], v[:, :, : 64 * span])
        torch.testing.assert_close(kept[:, :, span, :15].reshape(1, 2, 5, 3), kv0 + kv)
        torch.testing.assert_close(kept[:, :, span, 15:], z0 + z)


def test_the_backward_computes_dq_from_the_kept_states():
    """A kept state changed by 1% changes dq and leaves dk, dv (from the suffix states) as they were."""
    q, k, v = (t.detach().double() for t in qkv(300, 5, 3))
    out, den, _, _, kept = torch.ops.lintf.causal_product(q, k, v, 1e-6, True, None, None, 64)
    grad = torch.randn_like(v)
    backward = torch.ops.lintf.causal_product_backward
    recomputed = backward(grad, q, k, v, out, den, True)
    from_kept = backward(grad, q, k, v, out, den, True, None, None, None, None, kept, 64)
    changed = backward(grad, q, k, v, out, den, True, None, None, None, None, kept * 1.01, 64)
    for a, b in zip(recomputed, from_kept):
        torch.testing.assert_close(a, b)
    assert not torch.allclose(changed[0], recomputed[0])
    for a, b in zip(changed[1:], recomputed[1:]):
        torch.testing.assert_close(a, b)


def test_kept_states_of_another_spacing_are_refused():
    q, k, v = (t.detach() for t in qkv(300, 5, 3))
    out, den, _, _, kept = torch.ops.lintf.causal_product(q, k, v, 1e-6, True, None, None, 64)
    with pytest.raises(RuntimeError, match="kept_states must be the contiguous"):
        torch.ops.lintf.causal_product_backward(torch.ones_like(v), q, k, v, out, den, True, None, None, None, None,
                                                kept, 32)
    with pytest.raises(RuntimeError, match="states_every must be 0 or a positive multiple of 32"):
        torch.ops.lintf.causal_product(q, k, v, 1e-6, True, None, None, 48)


def test_a_bad_mode_is_refused_at_the_call(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", "keep")
    with pytest.raises(ValueError, match="LINTF_CPU_BACKWARD='keep' is not valid: use one of recompute, stored, auto"):
        compiled.causal_product(*qkv(40, 4, 4), 1e-6, True, None)
