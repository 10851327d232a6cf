"""The compiled GLA (lintf::gated_linear_attention) against the naive recurrence, and its torch.library parts.

Every test skips when the compiled op is unavailable (LINTF_EXTENSION=off, no compiler, an older
build). The op works in chunks of 32 positions, so lengths above 32 cross chunk boundaries.
"""

from __future__ import annotations

import pytest
import torch

import lintf.ops
from lintf.ops import gated_linear_attention
from lintf.ops.gla import compiled as gla_compiled
from lintf.ops.gla.reference import gated_linear_attention_reference
from tests.ops.gla.cases import inputs, op, outputs_and_grads


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not gla_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled GLA is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


def test_every_vector_path_matches_in_fp64_and_fp32(monkeypatch):
    leaves = inputs(70, c=9, m=5, strength=2.0)
    want = outputs_and_grads(gated_linear_attention_reference, leaves)
    for path in lintf.ops.cpu_vector_paths():
        monkeypatch.setenv("LINTF_CPU_PATH", path)
        for precision, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            low = [t.detach().to(precision).requires_grad_() for t in leaves]
            for got, expected in zip(outputs_and_grads(op, low), want):
                error = (got.double() - expected).abs().max() / expected.abs().max().clamp_min(1)
                assert error < tolerance, (path, precision, error)


def test_gradcheck_across_chunks():
    leaves = inputs(37, c=3, m=2, batch=1, heads=2)
    with torch.no_grad():
        leaves[3].clamp_(max=-0.05)  # stays <= 0 under gradcheck's perturbations
    assert torch.autograd.gradcheck(op, leaves)


def test_double_backward_runs_the_pytorch_path():
    leaves = inputs(9, c=2, m=2, batch=1, heads=1)
    with torch.no_grad():
        leaves[3].clamp_(max=-0.05)
    assert torch.autograd.gradgradcheck(op, leaves)


def test_non_contiguous_inputs():
    q, k, v, log_gate, state = (t.detach() for t in inputs(50, c=6, m=4))
    q, k, v, log_gate = (t.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in (q, k, v, log_gate))
    state = state.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    leaves = [q, k, v, log_gate, state]
    assert not any(t.is_contiguous() for t in leaves)
    for got, want in zip(outputs_and_grads(op, leaves), outputs_and_grads(gated_linear_attention_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_cpu_tensors_take_the_compiled_op_unless_the_extension_is_off(monkeypatch):
    q, k, v, log_gate, _ = (t.detach() for t in inputs(10))
    calls = []
    original = gla_compiled.gated_linear_attention
    monkeypatch.setattr(gla_compiled, "gated_linear_attention", lambda *args: calls.append(1) or original(*args))
    gated_linear_attention(q, k, v, log_gate)
    assert calls == [1]
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    gated_linear_attention(q, k, v, log_gate)
    assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_state", [False, True])
def test_opcheck(dtype, with_state):
    q, k, v, log_gate, state = (t.detach().to(dtype).requires_grad_() for t in inputs(40, c=4, m=3, batch=1))
    args = (q, k, v, log_gate, 0.5) + ((state,) if with_state else ())
    torch.library.opcheck(torch.ops.lintf.gated_linear_attention.default, args)


def test_autocast_casts_inputs_and_keeps_the_fp32_state():
    q, k, v, log_gate, state = (t.detach().float() for t in inputs(40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = torch.ops.lintf.gated_linear_attention(q, k, v, log_gate, 0.5, state)
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32
    rounded = [t.bfloat16().double() for t in (q, k, v)]
    want, _ = gated_linear_attention_reference(*rounded, log_gate.double(), state.double(), scale=0.5)
    assert (out.double() - want).abs().max() / want.abs().max() < 3e-2
