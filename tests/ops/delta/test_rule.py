"""lintf.ops.delta_rule against the naive recurrence written from its definition (lintf/ops/delta/reference.py).

Every test runs the op as users call it: through the compiled CPU op where it is built, else the
PyTorch path; ``test_chunked.py`` pins the PyTorch path itself.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import delta_rule
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.delta.cases import inputs, op, outputs_and_grads


@pytest.mark.parametrize("decay", [False, True])
@pytest.mark.parametrize("n", [1, 7, 64, 100])
@pytest.mark.parametrize("c, m", [(5, 3), (16, 17), (1, 1)])
def test_outputs_state_and_every_gradient_match_the_recurrence(n, c, m, decay):
    leaves = inputs(n, c, m, decay=decay)
    for got, want in zip(outputs_and_grads(op, leaves), outputs_and_grads(delta_rule_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_scale_and_no_initial_state():
    q, k, v, beta, log_decay, _ = inputs(20)
    out = delta_rule(q, k, v, beta, log_decay=log_decay, scale=0.7)
    torch.testing.assert_close(out, delta_rule_reference(q, k, v, beta, log_decay, scale=0.7)[0])
    torch.testing.assert_close(delta_rule(q, k, v, beta), delta_rule_reference(q, k, v, beta)[0])


@pytest.mark.parametrize("split", [1, 31, 32, 33, 64, 99])
def test_split_with_the_state_equals_one_pass(split):
    leaves = inputs(100)

    def in_two_pieces(q, k, v, beta, log_decay, state):
        head = [t[:, :, :split] for t in (q, k, v, beta, log_decay)]
        tail = [t[:, :, split:] for t in (q, k, v, beta, log_decay)]
        first, middle = op(*head, state)
        second, last = op(*tail, middle)
        return torch.cat([first, second], dim=2), last

    for got, want in zip(outputs_and_grads(in_two_pieces, leaves), outputs_and_grads(delta_rule_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_recurrent_steps_equal_the_whole():
    q, k, v, beta, log_decay, state = (t.detach() for t in inputs(12))
    outputs, running = [], state
    for t in range(12):
        step = [x[:, :, t : t + 1] for x in (q, k, v, beta, log_decay)]
        out, running = op(*step, running)
        outputs.append(out)
    want, want_state = delta_rule_reference(q, k, v, beta, log_decay, state)
    torch.testing.assert_close(torch.cat(outputs, dim=2), want)
    torch.testing.assert_close(running, want_state)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
def test_reduced_precision_against_fp64(dtype, tolerance):
    """Inputs rounded to dtype against fp64 on the rounded values: accumulation is fp32, the state fp32."""
    q, k, v, beta, log_decay, state = (t.detach() for t in inputs(100, c=16, m=8))
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out, final = delta_rule(q, k, v, beta.float(), log_decay=log_decay.float(), initial_state=state.float(),
                            return_state=True)
    assert out.dtype == dtype and final.dtype == torch.float32
    want, want_state = delta_rule_reference(*(t.double() for t in (q, k, v, beta, log_decay)), state)
    for got, expected in ((out, want), (final, want_state)):
        error = (got.double() - expected).abs().max() / expected.abs().max()
        assert error < tolerance, error


def test_autocast_runs_in_bf16_with_an_fp32_state():
    q, k, v, beta, log_decay, state = (t.detach().float() for t in inputs(40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = op(q, k, v, beta, log_decay, state)
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32
    rounded = [t.bfloat16().double() for t in (q, k, v)]
    want, _ = delta_rule_reference(*rounded, beta.double(), log_decay.double(), state.double())
    assert (out.double() - want).abs().max() / want.abs().max() < 3e-2


@pytest.mark.parametrize("batch, n, c, m", [(0, 5, 4, 3), (2, 0, 4, 3), (2, 5, 0, 3), (2, 5, 4, 0)])
def test_empty_dimensions(batch, n, c, m):
    q, k, v, beta, log_decay, state = (t.detach() for t in inputs(n, c, m, batch=batch))
    out, final = op(q, k, v, beta, log_decay, state, scale=0.5)
    want, want_state = delta_rule_reference(q, k, v, beta, log_decay, state, scale=0.5)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(final, want_state)
