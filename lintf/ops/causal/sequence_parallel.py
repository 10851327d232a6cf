"""Causal linear attention over one sequence split across ranks (sequence parallelism).

Rank r of R holds positions [r N/R, (r+1) N/R) of every sequence. Each rank sums its own keys and
values into a local state (k^T v, sum k), the ranks exchange these (C x M) states with one
all-gather, and each starts its local causal product from the sum of the states of the ranks
before it (an exclusive prefix scan). The result equals the op on the whole sequence. In the
backward pass the gradient reaching a rank's incoming state belongs to the local states of all
earlier ranks: one more all-gather and a reverse (exclusive suffix) scan route it there.
Communication is O(B H C M) per call whatever N is; memory per rank is that of N / R positions.

Works with any ``torch.distributed`` backend that has all_gather (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lintf.ops.causal.product import causal_dot_product, causal_linear_attention
from lintf.ops.causal.state import LinearAttentionState
from lintf.ops.common.arguments import check_eps
from lintf.ops.common.dtypes import accumulation_dtype


def gather_from_ranks(tensor: Tensor, group: Any) -> list[Tensor]:
    """``tensor`` of every rank of ``group``, in rank order."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return parts


class ExclusivePrefixState(torch.autograd.Function):
    """Forward: the sum of the local states of the ranks before this one; backward: the reverse scan."""

    @staticmethod
    def forward(ctx: Any, local: Tensor, group: Any) -> Tensor:  # noqa: D102 (autograd hook)
        rank = dist.get_rank(group)
        ctx.group, ctx.rank = group, rank
        states = gather_from_ranks(local, group)
        return torch.stack(states[:rank]).sum(dim=0) if rank else torch.zeros_like(local)

    @staticmethod
    def backward(ctx: Any, grad_incoming: Tensor) -> tuple[Tensor, None]:  # noqa: D102 (autograd hook)
        grads = gather_from_ranks(grad_incoming, ctx.group)
        later = grads[ctx.rank + 1 :]
        return (torch.stack(later).sum(dim=0) if later else torch.zeros_like(grad_incoming)), None


def local_state(k: Tensor, v: Tensor) -> Tensor:
    """The rank's own keys and values as one (B, H, C, M + 1) tensor: [k^T v | sum_j k_j], accumulation dtype."""
    acc = accumulation_dtype(v.dtype)
    keys = k.to(acc)
    with torch.autocast(k.device.type, enabled=False):
        kv = torch.einsum("bhnc,bhnm->bhcm", keys, v.to(acc))  # (B, H, C, M)
    return torch.cat([kv, keys.sum(dim=2).unsqueeze(-1)], dim=-1)  # (B, H, C, M + 1)


def incoming_state(k: Tensor, v: Tensor, group: Any = None) -> LinearAttentionState:
    """The state of all positions held by earlier ranks of ``group`` (differentiable)."""
    incoming = ExclusivePrefixState.apply(local_state(k, v), group)  # (B, H, C, M + 1)
    return LinearAttentionState(incoming[..., :-1], incoming[..., -1])


def check_group_inputs(q: Tensor, group: Any, owner: str = "sequence parallel causal product") -> None:
    """Raise ValueError unless torch.distributed is initialised and q is (B, H, N_local, C)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("sequence parallelism needs torch.distributed initialised (init_process_group) first")
    if not isinstance(q, Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"{owner}: q must be (B, H, N_local, C), got {got}")


def sequence_parallel_causal_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6, group: Any = None
) -> Tensor:
    """Causal linear attention of a sequence whose positions are split in order across the ranks of ``group``.

    Args:
        q: (B, H, N_r, C) feature-mapped queries of this rank's positions.
        k: (B, H, N_r, C) feature-mapped keys of the same positions.
        v: (B, H, N_r, M) values.
        eps: added to the denominator; a finite number >= 0 (else a ValueError, before any communication).
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.

    Returns:
        (B, H, N_r, M): this rank's rows of causal linear attention over the whole sequence.
    """
    check_eps("sequence-parallel causal linear attention", eps)
    check_group_inputs(q, group)
    return causal_linear_attention(q, k, v, eps, initial_state=incoming_state(k, v, group))


def sequence_parallel_causal_dot_product(q: Tensor, k: Tensor, v: Tensor, group: Any = None) -> Tensor:
    """The numerator alone (``causal_dot_product``) over a sequence split across ``group``; shapes as above."""
    check_group_inputs(q, group)
    return causal_dot_product(q, k, v, initial_state=incoming_state(k, v, group))


def split_sequence(x: Tensor, group: Any = None, dim: int = 2) -> Tensor:
    """This rank's consecutive part of ``x`` along ``dim``; ValueError unless the length divides evenly."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    length = x.shape[dim]
    if length % world:
        raise ValueError(f"sequence parallelism: a sequence of {length} positions does not split into {world} equal "
                         f"parts; pad it to a multiple of {world} (e.g. {-(-length // world) * world})")
    return x.narrow(dim, rank * (length // world), length // world)
