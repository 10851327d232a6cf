"""Causal linear attention over one sequence split across ranks (sequence parallelism).

Rank r of R holds positions [r N/R, (r+1) N/R) of every sequence. Each rank sums its own keys and
values into a local state (k^T v, sum k), the ranks exchange these (C x M) states with one
all-gather, and each starts its local causal product from the sum of the states of the ranks
before it (an exclusive prefix scan). The result equals the op on the whole sequence. In the
backward pass the gradient reaching a rank's incoming state belongs to the local states of all
earlier ranks: one more all-gather and a reverse (exclusive suffix) scan route it there.
Communication is O(B H C M) per call whatever N is; memory per rank is that of N / R positions.

Packed documents: every rank passes the whole row's ``cu_seqlens`` (the same on every rank) and holds
the positions [r N_r, (r + 1) N_r) that ``split_sequence`` gives it. A rank's local state is then that of
its positions from its last document start on, and a rank in which a document starts (at its first
position or later) passes on only that: the prefix scan restarts there (``ResettingPrefixState``). The
rank runs its part as packed documents, the first one from the incoming state unless a document starts
at the rank's first position, every later one from zeros.

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
from lintf.ops.common.boundaries import check_cu_seqlens, local_boundaries
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


class ResettingPrefixState(torch.autograd.Function):
    """Forward: S_r = c_{r-1} S_{r-1} + local_{r-1} from S_0 = 0, with c_r = 0 where a document starts on rank r,
    else 1; backward: the reverse scan. The carries are host numbers every rank knows from cu_seqlens."""

    @staticmethod
    def forward(ctx: Any, local: Tensor, carries: list[float], group: Any) -> Tensor:  # noqa: D102 (autograd hook)
        rank = dist.get_rank(group)
        ctx.group, ctx.rank, ctx.carries = group, rank, carries
        states = gather_from_ranks(local, group)
        state = torch.zeros_like(local)
        for earlier in range(rank):
            state = carries[earlier] * state + states[earlier]
        return state

    @staticmethod
    def backward(ctx: Any, grad_incoming: Tensor) -> tuple[Tensor, None, None]:  # noqa: D102 (autograd hook)
        grads = gather_from_ranks(grad_incoming, ctx.group)
        later = torch.zeros_like(grad_incoming)  # dL/dS_{r+1} through every later rank
        for rank in range(len(grads) - 1, ctx.rank, -1):
            later = grads[rank] + ctx.carries[rank] * later
        return later, None, None


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


def document_states(
    owner: str, q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, group: Any
) -> tuple[Tensor, LinearAttentionState]:
    """The rank's own boundaries (a CPU tensor) and its documents' initial states from the whole row's cu_seqlens.

    Args:
        owner: the op, for messages.
        q: (1, H, N_r, C) this rank's queries.
        k: (1, H, N_r, C) keys.
        v: (1, H, N_r, M) values.
        cu_seqlens: the whole row's boundaries, from 0 to R N_r.
        group: the process group.

    Returns:
        The (D_r + 1,) local boundaries and the (D_r, ...) initial states: the incoming state for a first
        document begun on an earlier rank, zeros for every document that starts on this rank.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    length = q.shape[2]
    bounds = check_cu_seqlens(owner, cu_seqlens, q, length * world)
    starting = {b // max(length, 1) for b in bounds[:-1]}  # the ranks on which a document starts
    carries = [0.0 if r in starting else 1.0 for r in range(world)]
    local, resets = local_boundaries(bounds, rank * length, length)
    last = local[-2]  # the rank's last document start: what it passes on
    incoming = ResettingPrefixState.apply(local_state(k[:, :, last:], v[:, :, last:]), carries, group)
    # the incoming state stays in the graph even where it is cut, so every rank joins the backward's all-gather
    first = incoming * (0.0 if resets else 1.0)
    starts = torch.cat([first, first.new_zeros(len(local) - 2, *first.shape[1:])])  # (D_r, H, C, M + 1)
    return torch.tensor(local, dtype=torch.int64), LinearAttentionState(starts[..., :-1], starts[..., -1])


def sequence_parallel_causal_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6, group: Any = None, *, cu_seqlens: Tensor | None = None
) -> Tensor:
    """Causal linear attention of a sequence whose positions are split in order across the ranks of ``group``.

    Args:
        q: (B, H, N_r, C) feature-mapped queries of this rank's positions.
        k: (B, H, N_r, C) feature-mapped keys of the same positions.
        v: (B, H, N_r, M) values.
        eps: added to the denominator; a finite number >= 0 (else a ValueError, before any communication).
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.
        cu_seqlens: the WHOLE row's (D + 1,) document boundaries (the same on every rank; B = 1, N_r the same
            on every rank, as ``split_sequence`` gives), or None. See the module's docstring.

    Returns:
        (B, H, N_r, M): this rank's rows of causal linear attention over the whole sequence.
    """
    owner = "sequence-parallel causal linear attention"
    check_eps(owner, eps)
    check_group_inputs(q, group)
    if cu_seqlens is None:
        return causal_linear_attention(q, k, v, eps, initial_state=incoming_state(k, v, group))
    local, starts = document_states(owner, q, k, v, cu_seqlens, group)
    return causal_linear_attention(q, k, v, eps, initial_state=starts, cu_seqlens=local)


def sequence_parallel_causal_dot_product(
    q: Tensor, k: Tensor, v: Tensor, group: Any = None, *, cu_seqlens: Tensor | None = None
) -> Tensor:
    """The numerator alone (``causal_dot_product``) over a sequence split across ``group``; arguments as above."""
    check_group_inputs(q, group)
    if cu_seqlens is None:
        return causal_dot_product(q, k, v, initial_state=incoming_state(k, v, group))
    local, starts = document_states("sequence-parallel causal product", q, k, v, cu_seqlens, group)
    return causal_dot_product(q, k, v, initial_state=starts, cu_seqlens=local)


def split_sequence(x: Tensor, group: Any = None, dim: int = 2) -> Tensor:
    """This rank's consecutive part of ``x`` along ``dim``; ValueError unless the length divides evenly."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    length = x.shape[dim]
    if length % world:
        raise ValueError(f"sequence parallelism: a sequence of {length} positions does not split into {world} equal "
                         f"parts; pad it to a multiple of {world} (e.g. {-(-length // world) * world})")
    return x.narrow(dim, rank * (length // world), length // world)
