"""Packed documents: a row of concatenated documents, re-laid as batches of documents and back.

A packed row holds D documents end to end, with boundaries ``cu_seqlens`` as in flash-attn and FLA:
a 1-D int32 or int64 tensor (D + 1,) that starts at 0, never decreases and ends at N, so document d
covers positions [cu_seqlens[d], cu_seqlens[d + 1]); a document may be empty (two equal boundaries).
The inputs then have a batch of one row, q (1, H, N, C). Every recurrent op serves such a row by the
same re-layout, whatever backend runs it (compiled CPU kernels, CUDA kernels, the PyTorch paths):

- documents are grouped by length class: lengths in (2^(c-1), 2^c] form class c (length 1 is class 0);
- each class becomes one batch (G, H, L, ...) with L the longest length in it, each document right-
  padded with zeros; one op call per class, each document starting from its own initial state;
- the outputs are gathered back into packed order, the final states into document order.

Zeros are neutral for every op: a padded position with k = v = 0, log-decay 0 (decay 1), log-gate 0
and beta 0 leaves the state as it is, so the final states are exact, and the padded outputs are
dropped, so their gradient is zero. Every document is padded to less than twice its length: the
padded batches hold fewer than 2N positions in all, in at most ceil(log2 L) + 1 op calls (L the
longest document), however the lengths mix (no document is padded to the longest one in the row).

The plan is derived once per call from ``cu_seqlens.tolist()``: on the CPU a plain read, on a GPU one
synchronisation of the host with the device (pass cu_seqlens as a CPU tensor to avoid it). Gathers and
scatters are ``index_select`` calls, so autograd routes gradients back exactly. The checks of the
boundaries and of the per-document states are ``boundaries.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lintf.ops.common.boundaries import check_cu_seqlens, check_document_states

State = Tensor | tuple[Tensor, ...]
"""An op's state: a tensor or a named tuple of tensors, each with the batch first."""
Run = Callable[[dict[str, Tensor | None], State | None], tuple[Tensor, State | None]]
"""(per-position tensors of one batch of documents, their initial states) -> (out, final states or None)."""

@dataclass(frozen=True)
class DocumentGroup:
    """Documents of one length class, run as one batch.

    Args:
        documents: (G,) int64 indices of the documents, on the inputs' device.
        count: G.
        length: L, the longest of their lengths (the batch's padded length).
    """

    documents: Tensor
    count: int
    length: int


@dataclass(frozen=True)
class DocumentPlan:
    """How a packed row is re-laid.

    Args:
        lengths: the documents' lengths.
        groups: the non-empty documents by length class.
        gather: (sum G L,) the packed position of each slot of the groups' batches laid end to end, N for a
            padded slot (a zero appended to the row).
        scatter: (N,) for each packed position, its slot in the groups' batches laid end to end.
        offset: (N,) each packed position's place in its document.
        padded: (N,) the padded length L of each packed position's group.
        empty: (E,) int64 indices of the empty documents.
        order: (D,) for each document, its row in the groups' final states followed by the empty documents'.
    """

    lengths: tuple[int, ...]
    groups: tuple[DocumentGroup, ...]
    gather: Tensor
    scatter: Tensor
    offset: Tensor
    padded: Tensor
    empty: Tensor
    order: Tensor


@dataclass(frozen=True)
class HeadLayout:
    """A plan's gather and scatter over every head: batches (G, H, L, ...) contiguous, in one index_select each.

    Args:
        gather: (sum G H L,) for each slot of the batches laid end to end, its row h (N + 1) + position of the
            packed row (H, N + 1) with a zero appended to every head; N for a padded slot.
        scatter: (H N,) for each (head, position) of the packed row, its slot in the batches laid end to end.
    """

    gather: Tensor
    scatter: Tensor


def length_class(length: int) -> int:
    """The class c of a document length >= 1: lengths in (2^(c-1), 2^c] share a class."""
    return (length - 1).bit_length()


def plan_documents(bounds: Sequence[int], device: torch.device) -> DocumentPlan:
    """The re-layout of a packed row with boundaries ``bounds`` (checked by ``check_cu_seqlens``).

    Args:
        bounds: D + 1 boundaries from 0 to N.
        device: the inputs' device, where the index tensors go.
    """
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    classes: dict[int, list[int]] = {}
    for document, length in enumerate(lengths):
        if length:
            classes.setdefault(length_class(length), []).append(document)
    members = [classes[c] for c in sorted(classes)]
    groups = [DocumentGroup(_indices(docs, device), len(docs), max(lengths[d] for d in docs)) for docs in members]
    empty = [d for d, length in enumerate(lengths) if not length]
    order = [d for docs in members for d in docs] + empty  # the documents' rows in the batches, then the empty
    rows = torch.empty(len(lengths), dtype=torch.int64)
    rows[order] = torch.arange(len(order))
    gather, scatter, offset, padded = _slots(bounds, lengths, members, groups)
    indices = (_indices(t, device) for t in (gather, scatter, offset, padded, empty, rows))
    return DocumentPlan(tuple(lengths), tuple(groups), *indices)


def _slots(
    bounds: Sequence[int], lengths: list[int], members: list[list[int]], groups: list[DocumentGroup]
) -> tuple[Tensor, Tensor]:
    """(gather, scatter, offset, padded) of ``DocumentPlan``, computed on the host with vector ops (no loop over
    positions)."""
    total = bounds[-1]
    starts, sizes = torch.tensor(bounds[:-1], dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)
    bases, widths = torch.zeros(len(lengths), dtype=torch.int64), torch.zeros(len(lengths), dtype=torch.int64)
    gathers = []
    slot = 0
    for docs, group in zip(members, groups):
        index = torch.tensor(docs, dtype=torch.int64)
        offsets = torch.arange(group.length)  # (L,)
        positions = starts[index, None] + offsets  # (G, L)
        gathers.append(torch.where(offsets < sizes[index, None], positions, total).flatten())  # padded: the zero
        bases[index] = slot + group.length * torch.arange(group.count)
        widths[index] = group.length
        slot += group.count * group.length
    # position p of document d lies in slot bases[d] + (p - starts[d])
    offset = torch.arange(total) - torch.repeat_interleave(starts, sizes, output_size=total)
    scatter = torch.repeat_interleave(bases, sizes, output_size=total) + offset
    gather = torch.cat(gathers) if gathers else torch.zeros(0, dtype=torch.int64)
    return gather, scatter, offset, torch.repeat_interleave(widths, sizes, output_size=total)


def head_layout(plan: DocumentPlan, heads: int) -> HeadLayout:
    """The plan's indices over ``heads`` heads, computed where the plan lives (on the inputs' device).

    Group g's batch is (G, H, L) in the slots [H B_g, H (B_g + G L)) with B_g its first slot in ``plan.gather``:
    slot (i, h, l) takes row h (N + 1) + gather[B_g + i L + l]; a position in slot s = B_g + i L + l of the
    plan returns from H (s - l) + h L + l.
    """
    total = plan.scatter.shape[0]
    head = torch.arange(heads, device=plan.gather.device)
    parts, first = [], 0
    for group in plan.groups:
        rows = plan.gather[first : first + group.count * group.length].view(group.count, 1, group.length)
        parts.append((rows + head.view(1, heads, 1) * (total + 1)).flatten())  # (G H L,)
        first += group.count * group.length
    gather = torch.cat(parts) if parts else plan.gather
    scatter = heads * (plan.scatter - plan.offset) + plan.offset + head.view(heads, 1) * plan.padded  # (H, N)
    return HeadLayout(gather, scatter.flatten())


def _indices(values: Sequence[int] | Tensor, device: torch.device) -> Tensor:
    """int64 indices on ``device``, copied from the host without waiting for the device (pinned on CUDA)."""
    indices = torch.as_tensor(values, dtype=torch.int64)
    if device.type == "cuda":
        indices = indices.pin_memory()
    return indices.to(device, non_blocking=True)


def pack_groups(x: Tensor, plan: DocumentPlan, layout: HeadLayout | None = None) -> list[Tensor]:
    """Each group's documents of a packed per-position tensor, right-padded with zeros.

    One copy of the row and one gather for all groups, straight into the batches' layout, so the work
    (and the backward's) is O(N) whatever the number of groups.

    Args:
        x: (1, H, N, ...) the packed tensor.
        plan: the re-layout.
        layout: ``head_layout(plan, H)``, when several tensors share it.

    Returns:
        For each group, (G, H, L, ...) one document per row (contiguous views of one gathered tensor).
    """
    heads, features = x.shape[1], x.shape[3:]
    layout = head_layout(plan, heads) if layout is None else layout
    rows = x.reshape(heads, x.shape[2], -1)  # (H, N, F), F = 1 without features
    padded = torch.cat([rows, rows.new_zeros(heads, 1, rows.shape[2])], dim=1).flatten(0, 1)  # (H (N + 1), F)
    taken = padded.index_select(0, layout.gather)  # (sum G H L, F)
    parts = taken.split([group.count * heads * group.length for group in plan.groups])
    return [part.view(group.count, heads, group.length, *features) for part, group in zip(parts, plan.groups)]


def unpack_outputs(outputs: Sequence[Tensor], plan: DocumentPlan, layout: HeadLayout | None = None) -> Tensor:
    """The groups' outputs (G, H, L, M) back in packed order (1, H, N, M), padded slots dropped."""
    heads, width = outputs[0].shape[1], outputs[0].shape[3]
    layout = head_layout(plan, heads) if layout is None else layout
    slots = torch.cat([out.reshape(-1, width) for out in outputs])  # (sum G H L, M)
    return slots.index_select(0, layout.scatter).view(1, heads, -1, width)  # (1, H, N, M)


def select_states(state: State | None, documents: Tensor) -> State | None:
    """The rows ``documents`` of a state (a tensor or a named tuple of tensors, batch first)."""
    if state is None or isinstance(state, Tensor):
        return None if state is None else state.index_select(0, documents)
    return _rebuild(state, [part.index_select(0, documents) for part in state])


def concatenate_states(states: Sequence[State]) -> State:
    """States of several batches as one, along the batch."""
    if isinstance(states[0], Tensor):
        return torch.cat(list(states), dim=0)
    return _rebuild(states[0], [torch.cat(parts, dim=0) for parts in zip(*states)])


def _rebuild(like: tuple | list, parts: list[Tensor]) -> tuple | list:
    """``parts`` in the container type of ``like``: a named tuple, a tuple or a list."""
    return type(like)(parts) if type(like) in (tuple, list) else type(like)(*parts)


def packed_call(
    owner: str,
    run: Run,
    per_position: dict[str, Tensor | None],
    cu_seqlens: object,
    initial_state: State | None,
    return_state: bool,
    zero_state: Callable[[int], State],
) -> Tensor | tuple[Tensor, State]:
    """An op over the documents of a packed row: checks, the plan, one op call per length class.

    Args:
        owner: the op, for messages.
        run: the op on one batch of documents (no cu_seqlens), returning (out, final states).
        per_position: the packed per-position tensors (1, H, N, ...) by argument name, q first.
        cu_seqlens: (D + 1,) document boundaries (see the module's docstring).
        initial_state: one state per document (batch D), or None for zeros.
        return_state: also return the final state of each document.
        zero_state: n -> n zero states.

    Returns:
        (1, H, N, M) outputs; with ``return_state`` also the final states (batch D).
    """
    bounds = check_cu_seqlens(owner, cu_seqlens, next(iter(per_position.values())))
    if initial_state is not None:
        check_document_states(owner, initial_state, len(bounds) - 1)
    if len(bounds) == 2:  # one document: the row itself
        out, final = run(per_position, initial_state)
    else:
        plan = plan_documents(bounds, per_position["q"].device)
        out, final = run_documents(run, per_position, plan, initial_state, zero_state)
    return (out, final) if return_state else out


def run_documents(
    run: Run,
    per_position: dict[str, Tensor | None],
    plan: DocumentPlan,
    initial_state: State | None,
    zero_state: Callable[[int], State],
) -> tuple[Tensor, State]:
    """Run an op over every document of a packed row, each from its own initial state.

    Args:
        run: the op on one batch of documents (no cu_seqlens).
        per_position: the packed per-position tensors (1, H, N, ...) by argument name; None passes through.
        plan: the re-layout (``plan_documents``).
        initial_state: one state per document (batch D), or None for zeros.
        zero_state: n -> n zero states (the final state of an empty document without an initial state).

    Returns:
        The packed outputs (1, H, N, M) and the final state of each document (batch D).
    """
    outputs, finals = [], []
    layout = head_layout(plan, per_position["q"].shape[1])
    batches = {name: [None] * len(plan.groups) if x is None else pack_groups(x, plan, layout)
               for name, x in per_position.items()}
    for index, group in enumerate(plan.groups):
        tensors = {name: parts[index] for name, parts in batches.items()}
        out, final = run(tensors, select_states(initial_state, group.documents))
        outputs.append(out)
        finals.append(final)
    if plan.empty.numel():
        empties = len(plan.lengths) - sum(group.count for group in plan.groups)
        finals.append(zero_state(empties) if initial_state is None else select_states(initial_state, plan.empty))
    states = select_states(concatenate_states(finals), plan.order)
    if outputs:
        return unpack_outputs(outputs, plan, layout), states
    return _empty_output(run, per_position), states


def _empty_output(run: Run, per_position: dict[str, Tensor | None]) -> Tensor:
    """The (1, H, 0, M) output of a row without positions, from the op itself."""
    out, _ = run(per_position, None)
    return out
