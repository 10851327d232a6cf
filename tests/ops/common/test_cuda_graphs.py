"""The compiled ops inside CUDA graphs: captured once, replayed on new inputs, same results as eager calls.

A capturable op synchronises with the host nowhere and allocates only through the caching allocator:
capture fails otherwise (or a replay reads stale memory). Forward alone under ``torch.cuda.graph``,
forward and backward under ``torch.cuda.make_graphed_callables``; each replay gets inputs the capture
never saw and must equal the eager op on them. Skipped without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from lintf.ops import causal_linear_attention, decayed_dot_product, delta_rule, gated_linear_attention

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# B, H, N, C, M: a short sequence (launch-bound) and one of several chunks
SHAPES = [(2, 4, 16, 64, 64), (1, 2, 300, 64, 32)]


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """Normalised causal linear attention (gates unused)."""
    return causal_linear_attention(F.elu(q) + 1, F.elu(k) + 1, v)


def decayed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """The decayed product with log-decays logsigmoid(gates + 2), one per head and position."""
    return decayed_dot_product(q, k, v, F.logsigmoid(gates[..., 0] + 2))


def gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """Gated linear attention with log-gates logsigmoid(gates + 2), one per head, position and feature."""
    return gated_linear_attention(q, k, v, F.logsigmoid(gates + 2))


def gated_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """The delta rule on L2-normalised q, k with beta = sigmoid(gates_0) and log-decays logsigmoid(gates_1 + 2)."""
    q, k = F.normalize(q.float(), dim=-1).to(q.dtype), F.normalize(k.float(), dim=-1).to(k.dtype)
    return delta_rule(q, k, v, torch.sigmoid(gates[..., 0]), log_decay=F.logsigmoid(gates[..., 1] + 2))


OPS = {"causal": causal, "decayed": decayed, "gla": gla, "delta": gated_delta}


def fresh_inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """q, k (scaled), v (B, H, N, .) and gates (B, H, N, C) on the GPU."""
    b, h, n, c, m = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k = (torch.randn(b, h, n, c, generator=gen, device="cuda") / c**0.5 for _ in range(2))
    v = torch.randn(b, h, n, m, generator=gen, device="cuda")
    gates = torch.randn(b, h, n, c, generator=gen, device="cuda")
    return [t.to(dtype) for t in (q, k, v)] + [gates]


def warm_up(op: Callable, tensors: list[torch.Tensor]) -> None:
    """Eager calls on a side stream before capture (the documented pattern: loads the library, fills caches)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            op(*tensors)
    torch.cuda.current_stream().wait_stream(stream)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_forward_replays_like_eager(name, shape, dtype):
    op = OPS[name]
    static = fresh_inputs(shape, dtype, seed=0)
    warm_up(op, static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = op(*static)
    for seed in (1, 2):
        new = fresh_inputs(shape, dtype, seed)
        for slot, value in zip(static, new):
            slot.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_out, op(*new))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_forward_and_backward_replay_like_eager(name, shape):
    op = OPS[name]
    differentiable = 3 if name == "causal" else 4  # the causal product takes no gates

    def leaves(seed: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.requires_grad_(i < differentiable) for i, t in enumerate(fresh_inputs(shape, torch.float32, seed)))

    graphed = torch.cuda.make_graphed_callables(op, leaves(0))
    for seed in (1, 2):
        replayed, eager = leaves(seed), leaves(seed)
        grad_out = torch.randn_like(eager[2])
        graphed(*replayed).backward(grad_out)
        op(*eager).backward(grad_out)
        for got, want in zip(replayed[:differentiable], eager[:differentiable]):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-6)
