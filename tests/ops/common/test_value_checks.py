"""The ops' checks of input values (log-decays, gates, delta-rule steps) and when they may read values back.

On the CPU a value out of range is a ValueError naming it; on a GPU a device-side assertion
(test_host_syncs.py); ``values_checked`` leaves the check out while torch.compile traces.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import decayed_dot_product, decayed_linear_attention, delta_rule, gated_linear_attention
from lintf.ops.common.arguments import values_checked
from lintf.ops.decayed.cumsum import decayed_cumsum


def test_values_are_checked_eagerly_and_not_while_compiling():
    seen = []

    def probe(x: torch.Tensor) -> torch.Tensor:
        seen.append(values_checked(x))
        return x + 1

    x = torch.zeros(3)
    probe(x)
    torch.compile(probe, fullgraph=True, backend="eager")(x)
    assert seen == [True, False]
    assert not values_checked(torch.zeros(0))


def calls_with_a_positive_value(n: int = 4, c: int = 3) -> dict:
    q = torch.randn(1, 1, n, c)
    bad = torch.full((1, 1, n), 0.5)
    return {
        "decayed product": lambda: decayed_dot_product(q, q, q, bad),
        "decayed cumsum": lambda: decayed_cumsum(q, bad.unsqueeze(-1)),
        "gated linear attention": lambda: gated_linear_attention(q, q, q, bad.unsqueeze(-1).expand(1, 1, n, c)),
        "delta rule": lambda: delta_rule(q, q, q, torch.full((1, 1, n), 3.0)),
    }


@pytest.mark.parametrize("name", list(calls_with_a_positive_value()))
def test_eager_calls_refuse_values_out_of_range(name):
    with pytest.raises(ValueError, match="must be"):
        calls_with_a_positive_value()[name]()


@pytest.mark.parametrize("causal", [True, False])
def test_an_op_with_a_value_check_compiles_whole_and_matches_eager(causal):
    """decayed_linear_attention checks its log-decays, a check left out while tracing: the whole call is one graph."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    q, v = torch.rand(1, 2, 16, 8, generator=gen), torch.randn(1, 2, 16, 8, generator=gen)
    log_decay = -torch.rand(1, 2, 16, generator=gen)

    def op(q, k, v, log_decay):
        return decayed_linear_attention(q, k, v, log_decay, causal=causal)

    compiled = torch.compile(op, fullgraph=True)
    torch.testing.assert_close(compiled(q, q, v, log_decay), op(q, q, v, log_decay))
