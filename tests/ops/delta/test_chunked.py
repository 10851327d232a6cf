"""The delta rule's PyTorch path (the WY form per chunk) against the naive recurrence, at several chunk lengths."""

from __future__ import annotations

import pytest
import torch

from lintf.ops.delta.chunked import delta_rule_chunked
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.delta.cases import inputs, op, outputs_and_grads


def chunked(chunk: int):
    def run(q, k, v, beta, log_decay, state):
        return delta_rule_chunked(q, k, v, beta, log_decay, 0.4, state, chunk)

    return run


@pytest.mark.parametrize("decay", [False, True])
@pytest.mark.parametrize("n, chunk", [(1, 64), (9, 1), (30, 4), (37, 16), (64, 64), (70, 64)])
def test_outputs_state_and_gradients_match_the_recurrence(n, chunk, decay):
    leaves = inputs(n, c=6, m=4, decay=decay)
    want = outputs_and_grads(lambda *x: delta_rule_reference(*x, scale=0.4), leaves)
    for got, expected in zip(outputs_and_grads(chunked(chunk), leaves), want):
        torch.testing.assert_close(got, expected)


def test_strong_decay_and_unnormalised_keys_stay_exact():
    q, k, v, beta, log_decay, state = (t.detach() for t in inputs(50, c=4, m=3))
    log_decay = torch.full_like(log_decay, -30.0)
    k = 0.5 * k  # beta ||k||^2 < 1: a contraction either way
    got = chunked(16)(q, k, v, beta, log_decay, state)
    for a, b in zip(got, delta_rule_reference(q, k, v, beta, log_decay, state, scale=0.4)):
        torch.testing.assert_close(a, b)


def test_torch_compile_fullgraph_on_the_pytorch_path(monkeypatch):
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    q, k, v, beta, log_decay, state = (t.detach().float() for t in inputs(40))
    compiled_op = torch.compile(op, fullgraph=True)
    for got, want in zip(compiled_op(q, k, v, beta, log_decay, state), op(q, k, v, beta, log_decay, state)):
        torch.testing.assert_close(got, want)
