"""lintf.ops.gated_linear_attention against the naive recurrence from its definition (lintf/ops/gla/reference.py).

Every test runs the op as users call it: through the compiled CPU op where it is built, else the
PyTorch path.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import gated_linear_attention
from lintf.ops.gla.reference import gated_linear_attention_reference
from tests.ops.gla.cases import inputs, op, outputs_and_grads


@pytest.mark.parametrize("n", [1, 7, 40, 100])
@pytest.mark.parametrize("c, m", [(5, 3), (16, 17), (1, 1)])
def test_outputs_state_and_every_gradient_match_the_recurrence(n, c, m):
    leaves = inputs(n, c, m)
    for got, want in zip(outputs_and_grads(op, leaves), outputs_and_grads(gated_linear_attention_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_very_strong_gates_stay_finite_and_exact():
    leaves = inputs(50, strength=0.0)
    with torch.no_grad():
        leaves[3].fill_(-40.0)  # exp(-40 * 16) underflows: a factorised form would overflow
    got = outputs_and_grads(op, leaves)
    for a, b in zip(got, outputs_and_grads(gated_linear_attention_reference, leaves)):
        torch.testing.assert_close(a, b)
    low = outputs_and_grads(op, [t.detach().float().requires_grad_() for t in leaves])
    assert all(torch.isfinite(t).all() for t in low)


@pytest.mark.parametrize("split", [1, 15, 16, 17, 32, 33, 99])
def test_split_with_the_state_equals_one_pass(split):
    leaves = inputs(100)

    def in_two_pieces(q, k, v, log_gate, state):
        first, middle = op(*(t[:, :, :split] for t in (q, k, v, log_gate)), state)
        second, last = op(*(t[:, :, split:] for t in (q, k, v, log_gate)), middle)
        return torch.cat([first, second], dim=2), last

    want = outputs_and_grads(gated_linear_attention_reference, leaves)
    for got, expected in zip(outputs_and_grads(in_two_pieces, leaves), want):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
def test_reduced_precision_against_fp64(dtype, tolerance):
    q, k, v, log_gate, state = (t.detach() for t in inputs(100, c=16, m=8))
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out, final = op(q, k, v, log_gate.float(), state.float())
    assert out.dtype == dtype and final.dtype == torch.float32
    want, want_state = gated_linear_attention_reference(*(t.double() for t in (q, k, v, log_gate)), state)
    for got, expected in ((out, want), (final, want_state)):
        assert (got.double() - expected).abs().max() / expected.abs().max() < tolerance


def test_scale_and_no_initial_state():
    q, k, v, log_gate, _ = inputs(20)
    torch.testing.assert_close(gated_linear_attention(q, k, v, log_gate, scale=0.3),
                               gated_linear_attention_reference(q, k, v, log_gate, scale=0.3)[0])


@pytest.mark.parametrize("batch, n, c, m", [(0, 5, 4, 3), (2, 0, 4, 3), (2, 5, 0, 3), (2, 5, 4, 0)])
def test_empty_dimensions(batch, n, c, m):
    q, k, v, log_gate, state = (t.detach() for t in inputs(n, c, m, batch=batch))
    out, final = op(q, k, v, log_gate, state, scale=0.5)
    want, want_state = gated_linear_attention_reference(q, k, v, log_gate, state, scale=0.5)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(final, want_state)


def test_torch_compile_fullgraph_with_state():
    q, k, v, log_gate, state = (t.detach().float() for t in inputs(40))
    compiled_op = torch.compile(op, fullgraph=True)
    for got, want in zip(compiled_op(q, k, v, log_gate, state), op(q, k, v, log_gate, state)):
        torch.testing.assert_close(got, want)


def test_autocast_runs_in_bf16_with_an_fp32_state():
    q, k, v, log_gate, state = (t.detach().float() for t in inputs(40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = op(q, k, v, log_gate, state)
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32
    rounded = [t.bfloat16().double() for t in (q, k, v)]
    want, _ = gated_linear_attention_reference(*rounded, log_gate.double(), state.double())
    assert (out.double() - want).abs().max() / want.abs().max() < 3e-2
