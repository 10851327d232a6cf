"""The compiled delta rule (lintf::delta_rule) against the naive recurrence, and its torch.library parts.

Every test skips when the compiled op is unavailable (LINTF_EXTENSION=off, no compiler, an older
build). The op works in chunks of 32 positions, so lengths above 32 cross chunk boundaries.
"""

from __future__ import annotations

import pytest
import torch

import lintf.ops
from lintf.ops import delta_rule
from lintf.ops.delta import compiled as delta_compiled
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.delta.cases import inputs, op, outputs_and_grads


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not delta_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled delta rule is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


def scaled_errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[float]:
    return [((a.double() - b).abs().max() / b.abs().max().clamp_min(1)).item() for a, b in zip(got, want)]


@pytest.mark.parametrize("decay", [False, True])
def test_every_vector_path_matches_in_fp64_and_fp32(monkeypatch, decay):
    leaves = inputs(70, c=9, m=5, decay=decay)
    want = outputs_and_grads(delta_rule_reference, leaves)
    for path in lintf.ops.cpu_vector_paths():
        monkeypatch.setenv("LINTF_CPU_PATH", path)
        for precision, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            low = [None if t is None else t.detach().to(precision).requires_grad_() for t in leaves]
            assert max(scaled_errors(outputs_and_grads(op, low), want)) < tolerance, (path, precision)


def test_gradcheck_across_chunks():
    leaves = inputs(37, c=3, m=2, batch=1, heads=2)
    with torch.no_grad():
        leaves[3].clamp_(0.05, 1.95)  # stays in [0, 2] under gradcheck's perturbations
        leaves[4].clamp_(max=-0.05)
    assert torch.autograd.gradcheck(op, leaves)


def test_double_backward_runs_the_pytorch_path():
    leaves = inputs(9, c=2, m=2, batch=1, heads=1)
    with torch.no_grad():
        leaves[3].clamp_(0.05, 1.95)
        leaves[4].clamp_(max=-0.05)
    assert torch.autograd.gradgradcheck(op, leaves)


def test_non_contiguous_inputs():
    q, k, v, beta, log_decay, state = (t.detach() for t in inputs(50, c=6, m=4))
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in (q, k, v))
    beta, log_decay = (torch.stack([t, t], dim=-1)[..., 0].requires_grad_() for t in (beta, log_decay))
    state = state.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    leaves = [q, k, v, beta, log_decay, state]
    assert not any(t.is_contiguous() for t in leaves)
    for got, want in zip(outputs_and_grads(op, leaves), outputs_and_grads(delta_rule_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_cpu_tensors_take_the_compiled_op_unless_the_extension_is_off(monkeypatch):
    q, k, v, beta, log_decay, _ = (t.detach() for t in inputs(10))
    calls = []
    original = delta_compiled.delta_rule
    monkeypatch.setattr(delta_compiled, "delta_rule", lambda *args: calls.append(1) or original(*args))
    delta_rule(q, k, v, beta)
    assert calls == [1]
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    delta_rule(q, k, v, beta)
    assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("decay, with_state", [(False, False), (True, True)])
def test_opcheck(dtype, decay, with_state):
    q, k, v, beta, log_decay, state = (t.detach().to(dtype).requires_grad_() for t in inputs(40, 4, 3, batch=1))
    args = (q, k, v, beta, log_decay if decay else None, 0.5) + ((state,) if with_state else ())
    torch.library.opcheck(torch.ops.lintf.delta_rule.default, args)


def test_autocast_casts_inputs_and_keeps_the_fp32_state():
    q, k, v, beta, log_decay, state = (t.detach().float() for t in inputs(40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = torch.ops.lintf.delta_rule(q, k, v, beta, log_decay, 0.5, state)
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32
    rounded = [t.bfloat16().double() for t in (q, k, v)]
    want, _ = delta_rule_reference(*rounded, beta.double(), log_decay.double(), state.double(), scale=0.5)
    assert (out.double() - want).abs().max() / want.abs().max() < 3e-2


def test_torch_compile_fullgraph_with_state():
    q, k, v, beta, log_decay, state = (t.detach().float() for t in inputs(40))
    compiled_op = torch.compile(op, fullgraph=True)
    for got, want in zip(compiled_op(q, k, v, beta, log_decay, state), op(q, k, v, beta, log_decay, state)):
        torch.testing.assert_close(got, want)
