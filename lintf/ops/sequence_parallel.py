"""The decayed product, gated linear attention and the delta rule over one sequence split across ranks.

Rank r of R holds positions [r N/R, (r+1) N/R). Each of these recurrences is linear in its values
and its initial state together, and acts on the state's columns independently, so what a rank's
positions do to an incoming state is affine: S_out = A S_in + B, with A (C x C) the product of the
rank's transitions (for the delta rule, its (I - beta k k^T) factors times decays; for the decayed
product a scalar, for GLA a diagonal) and B the state its positions leave from zeros. One local run
with the values widened by C zero columns and the initial state [0 | I] gives all of it: the first
M columns are the outputs and B, the last C are A and the map Q' from the incoming state to the
outputs (out = out_0 + Q' S_in). The ranks all-gather (A, B), each scans the ranks before it for its
S_in, and the backward routes the gradient of every S_in back to the (A, B) of the earlier ranks by
the reverse scan. The result equals the op on the whole sequence; communication is O(B H C (C + M))
per call whatever N is, and a rank computes 1 + C / M times the work of its N / R positions.

Packed documents: every rank passes the whole row's ``cu_seqlens`` (the same on every rank) and holds the
positions [r N_r, (r + 1) N_r) that ``split_sequence`` gives it. A rank runs its part as packed documents
(``lintf.ops.common.documents``): its first document starts from [0 | I], so it carries the incoming state,
unless a document starts at the rank's first position; every later one starts from zeros. A document that
starts inside a rank cuts the carry: the rank's A is then zero, so no state passes through a boundary.

Works with any ``torch.distributed`` backend that has all_gather (gloo on CPU, NCCL on GPU). The
causal product's own form (no transition to carry) is ``causal/sequence_parallel.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lintf.ops.causal.sequence_parallel import check_group_inputs, gather_from_ranks
from lintf.ops.common.boundaries import check_cu_seqlens, local_boundaries
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.decayed.product import decayed_dot_product
from lintf.ops.delta.rule import delta_rule
from lintf.ops.gla.product import gated_linear_attention

Recurrence = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor | None], tuple[Tensor, Tensor]]
"""(q, k, values, initial_state, cu_seqlens) -> (out, final_state): one op with its other arguments fixed."""


class AffineScan(torch.autograd.Function):
    """Forward: the state entering this rank, S_{r+1} = A_r S_r + B_r from S_0 = 0; backward: the reverse scan."""

    @staticmethod
    def forward(ctx: Any, transition: Tensor, offset: Tensor, group: Any) -> Tensor:  # noqa: D102 (autograd hook)
        rank = dist.get_rank(group)
        transitions, offsets = gather_from_ranks(transition, group), gather_from_ranks(offset, group)
        state = torch.zeros_like(offset)
        for earlier in range(rank):
            state = transitions[earlier] @ state + offsets[earlier]
        ctx.save_for_backward(*transitions, state)
        ctx.group, ctx.rank = group, rank
        return state

    @staticmethod
    def backward(ctx: Any, grad_state: Tensor) -> tuple[Tensor, Tensor, None]:  # noqa: D102 (autograd hook)
        *transitions, state = ctx.saved_tensors
        grads = gather_from_ranks(grad_state, ctx.group)
        later = torch.zeros_like(grad_state)  # dL/dS_{r+1} through every later rank
        for rank in range(len(grads) - 1, ctx.rank, -1):
            later = grads[rank] + transitions[rank].transpose(-1, -2) @ later
        return later @ state.transpose(-1, -2), later, None


def sequence_parallel_recurrence(
    run: Recurrence, q: Tensor, k: Tensor, v: Tensor, group: Any, cu_seqlens: Tensor | None = None, owner: str = ""
) -> Tensor:
    """This rank's outputs of a column-separable linear recurrence over a sequence split across ``group``.

    Args:
        run: the op on (q, k, values, initial_state, cu_seqlens), returning (out, final_state).
        q: (B, H, N_r, C) this rank's queries.
        k: (B, H, N_r, C) keys.
        v: (B, H, N_r, M) values.
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.
        cu_seqlens: the whole row's document boundaries (B = 1), or None for one sequence per row.
        owner: the op, for messages.

    Returns:
        (B, H, N_r, M) in v's dtype.
    """
    acc = accumulation_dtype(v.dtype)
    batch, heads, length, features = q.shape
    value_dim = v.shape[-1]
    values = torch.cat([v.to(acc), v.new_zeros(batch, heads, length, features, dtype=acc)], dim=-1)  # [V | 0]
    identity = torch.eye(features, dtype=acc, device=v.device).expand(batch, heads, features, features)
    start = torch.cat([identity.new_zeros(batch, heads, features, value_dim), identity], dim=-1)  # [0 | I]
    local = None
    if cu_seqlens is not None:
        local, start = rank_documents(owner, q, start, cu_seqlens, group)
    out, final = run(q.to(acc), k.to(acc), values, start, local)  # (B, H, N_r, M + C), (B or D_r, H, C, M + C)
    final = final[-batch:]  # packed: the state after the rank's last document
    incoming = AffineScan.apply(final[..., value_dim:], final[..., :value_dim], group)  # (B, H, C, M)
    return (out[..., :value_dim] + out[..., value_dim:] @ incoming).to(v.dtype)


def rank_documents(owner: str, q: Tensor, start: Tensor, cu_seqlens: Tensor, group: Any) -> tuple[Tensor, Tensor]:
    """The rank's own boundaries (a CPU tensor) and its documents' initial states from the whole row's cu_seqlens.

    Args:
        owner: the op, for messages.
        q: (1, H, N_r, C) this rank's queries.
        start: (1, H, C, M + C) the [0 | I] state that carries the incoming state.
        cu_seqlens: the whole row's boundaries, from 0 to R N_r.
        group: the process group.

    Returns:
        The (D_r + 1,) local boundaries and (D_r, H, C, M + C) initial states: [0 | I] for a first document
        begun on an earlier rank, zeros for every document that starts on this rank.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    length = q.shape[2]
    bounds = check_cu_seqlens(owner, cu_seqlens, q, length * world)
    local, resets = local_boundaries(bounds, rank * length, length)
    starts = start.new_zeros(len(local) - 1, *start.shape[1:])  # (D_r, H, C, M + C)
    if not resets:
        starts[0] = start[0]
    return torch.tensor(local, dtype=torch.int64), starts


def sequence_parallel_decayed_dot_product(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, group: Any = None, *, cu_seqlens: Tensor | None = None
) -> Tensor:
    """``decayed_dot_product`` of a sequence whose positions are split in order across the ranks of ``group``.

    Args:
        q: (B, H, N_r, C) this rank's queries.
        k: (B, H, N_r, C) keys.
        v: (B, H, N_r, M) values.
        log_decay: (B, H, N_r) log-decays, <= 0.
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.
        cu_seqlens: the WHOLE row's (D + 1,) document boundaries (the same on every rank; B = 1, N_r the same
            on every rank, as ``split_sequence`` gives), or None. See the module's docstring.

    Returns:
        (B, H, N_r, M): this rank's rows of the product over the whole sequence.
    """
    owner = "sequence parallel decayed product"
    check_group_inputs(q, group, owner)

    def run(q: Tensor, k: Tensor, values: Tensor, start: Tensor, local: Tensor | None) -> tuple[Tensor, Tensor]:
        return decayed_dot_product(q, k, values, log_decay, initial_state=start, return_state=True, cu_seqlens=local)

    return sequence_parallel_recurrence(run, q, k, v, group, cu_seqlens, owner)


def sequence_parallel_gated_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, *, scale: float | None = None, group: Any = None,
    cu_seqlens: Tensor | None = None,
) -> Tensor:
    """``gated_linear_attention`` of a sequence split in order across the ranks of ``group``; arguments as there.

    Args:
        q: (B, H, N_r, C) this rank's queries.
        k: (B, H, N_r, C) keys.
        v: (B, H, N_r, M) values.
        log_gate: (B, H, N_r, C) log-gates, <= 0.
        scale: output scale; None is C ** -0.5.
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.
        cu_seqlens: the WHOLE row's (D + 1,) document boundaries (the same on every rank; B = 1, N_r the same
            on every rank, as ``split_sequence`` gives), or None. See the module's docstring.
    """
    owner = "sequence parallel gated linear attention"
    check_group_inputs(q, group, owner)

    def run(q: Tensor, k: Tensor, values: Tensor, start: Tensor, local: Tensor | None) -> tuple[Tensor, Tensor]:
        return gated_linear_attention(q, k, values, log_gate, scale=scale, initial_state=start, return_state=True,
                                      cu_seqlens=local)

    return sequence_parallel_recurrence(run, q, k, v, group, cu_seqlens, owner)


def sequence_parallel_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, *, log_decay: Tensor | None = None, scale: float | None = None,
    group: Any = None, cu_seqlens: Tensor | None = None,
) -> Tensor:
    """``delta_rule`` of a sequence split in order across the ranks of ``group``; arguments as there.

    Args:
        q: (B, H, N_r, C) this rank's queries.
        k: (B, H, N_r, C) keys.
        v: (B, H, N_r, M) values.
        beta: (B, H, N_r) writing strengths in [0, 2].
        log_decay: (B, H, N_r) log-decays (<= 0) or None.
        scale: output scale; None is C ** -0.5.
        group: the process group whose ranks hold consecutive parts, rank 0 first; None: the default group.
        cu_seqlens: the WHOLE row's (D + 1,) document boundaries (the same on every rank; B = 1, N_r the same
            on every rank, as ``split_sequence`` gives), or None. See the module's docstring.
    """
    owner = "sequence parallel delta rule"
    check_group_inputs(q, group, owner)

    def run(q: Tensor, k: Tensor, values: Tensor, start: Tensor, local: Tensor | None) -> tuple[Tensor, Tensor]:
        return delta_rule(q, k, values, beta, log_decay=log_decay, scale=scale, initial_state=start,
                          return_state=True, cu_seqlens=local)

    return sequence_parallel_recurrence(run, q, k, v, group, cu_seqlens, owner)
