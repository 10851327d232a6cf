"""GLA's PyTorch path against the naive recurrence, at several chunk lengths."""

from __future__ import annotations

import pytest
import torch

from lintf.ops.gla.chunked import gla_chunked
from lintf.ops.gla.reference import gated_linear_attention_reference
from tests.ops.gla.cases import inputs, outputs_and_grads


@pytest.mark.parametrize("n, chunk", [(1, 16), (9, 1), (30, 4), (37, 16), (70, 64)])
def test_outputs_state_and_gradients_match_the_recurrence(n, chunk):
    leaves = inputs(n, c=6, m=4, strength=3.0)
    want = outputs_and_grads(lambda *x: gated_linear_attention_reference(*x, scale=0.4), leaves)
    got = outputs_and_grads(lambda q, k, v, g, s: gla_chunked(q, k, v, g, 0.4, s, chunk), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
