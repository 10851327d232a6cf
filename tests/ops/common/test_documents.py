"""The re-layout of a packed row (lintf.ops.common.documents): its padding bound, its op calls, its exact round trip."""

from __future__ import annotations

import math

import pytest
import torch

from lintf.ops.common.boundaries import local_boundaries
from lintf.ops.common.documents import pack_groups, plan_documents, unpack_outputs


def plan_for(lengths: list[int]):
    bounds = [0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()]
    return plan_documents(bounds, torch.device("cpu"))


def draw_lengths(seed: int) -> list[int]:
    """Mixed lengths: many short documents, a few long ones, some empty."""
    gen = torch.Generator().manual_seed(seed)
    count = int(torch.randint(1, 40, (1,), generator=gen))
    scale = torch.randint(0, 11, (count,), generator=gen)  # log2 of a length's upper end
    return [int(torch.randint(0, 2 ** int(s) + 1, (1,), generator=gen)) for s in scale]


@pytest.mark.parametrize("lengths", [[1000, *[1] * 200], [1, 2, 3, 4, 5, 6, 7, 8, 9], [64] * 10, [33, 64, 65, 128]],
                         ids=["one long many short", "one to nine", "equal", "around powers of two"])
def test_padding_and_calls_are_bounded(lengths):
    plan = plan_for(lengths)
    total = sum(lengths)
    padded = sum(group.count * group.length for group in plan.groups)
    assert total <= padded < 2 * total
    assert len(plan.groups) <= math.ceil(math.log2(max(lengths))) + 1
    for group in plan.groups:  # every document padded to less than twice its length
        assert all(2 * lengths[d] > group.length >= lengths[d] for d in group.documents.tolist())


@pytest.mark.parametrize("seed", range(20))
def test_random_lengths_round_trip_exactly(seed):
    """Packing then unpacking returns every position, the padded slots hold zeros, the bound holds."""
    lengths = draw_lengths(seed)
    total = sum(lengths)
    plan = plan_for(lengths)
    x = torch.randn(1, 2, total, 3, dtype=torch.float64, requires_grad=True)
    batches = pack_groups(x, plan)
    padded = sum(b.shape[0] * b.shape[2] for b in batches)
    assert padded < 2 * total or total == 0
    assert sum(int((b != 0).any(-1).sum()) for b in batches) == int((x != 0).any(-1).sum())  # padding is zeros
    if batches:
        back = unpack_outputs(batches, plan)
        assert torch.equal(back, x)
        (grad,) = torch.autograd.grad((back * torch.arange(back.numel()).view_as(back)).sum(), x)
        assert torch.equal(grad, torch.arange(x.numel(), dtype=x.dtype).view_as(x))


def test_documents_keep_their_positions_inside_a_batch():
    plan = plan_for([3, 0, 4, 2])  # classes: 3, 4 -> padded 4; 2 -> padded 2
    x = torch.arange(9, dtype=torch.float64).view(1, 1, 9, 1) + 1
    batches = pack_groups(x, plan)
    assert [b[:, 0, :, 0].tolist() for b in batches] == [[[8.0, 9.0]], [[1.0, 2.0, 3.0, 0.0], [4.0, 5.0, 6.0, 7.0]]]
    assert plan.empty.tolist() == [1]


@pytest.mark.parametrize("start, want", [(0, ([0, 3, 6], True)), (6, ([0, 1, 6], True)), (12, ([0, 6], False)),
                                         (18, ([0, 2, 6], False))])
def test_a_rank_s_own_boundaries(start, want):
    bounds = [0, 3, 6, 6, 7, 20, 24]
    assert local_boundaries(bounds, start, 6) == want
