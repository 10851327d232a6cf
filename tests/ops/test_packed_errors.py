"""Bad document boundaries and per-document states are refused by every op, saying what is wrong and what is allowed."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState
from tests.ops.packed_cases import LINEAR_STATE, OPS, draw, op_call

LENGTHS = [3, 4]  # N = 7, D = 2


def call(op: str, cu_seqlens: object, batch: int = 1, state_rows: int | None = None) -> None:
    x = draw(op, LENGTHS)
    tensors = {key: t.detach().expand(batch, *t.shape[1:]) for key, t in x["leaves"].items() if key not in ("S", "z")}
    state = None
    if state_rows is not None:
        kv = x["leaves"]["S"].detach()[:1].expand(state_rows, -1, -1, -1)
        state = LinearAttentionState(kv, x["leaves"]["z"].detach()[:1].expand(state_rows, -1, -1)) \
            if op in LINEAR_STATE else kv
    op_call(op)(tensors, state, cu_seqlens)


BAD = {
    "a list": ([0, 3, 7], "must be a 1-D int32 or int64 tensor.*got list"),
    "float": (torch.tensor([0.0, 3.0, 7.0]), "int32 or int64.*got dtype torch.float32"),
    "2-D": (torch.tensor([[0, 3, 7]]), r"1-D.*shape \(1, 3\)"),
    "one entry": (torch.tensor([0]), r"\(D \+ 1,\).*shape \(1,\)"),
    "not from 0": (torch.tensor([1, 3, 7]), "start at 0 and end at N = 7, got 1 ... 7"),
    "not to N": (torch.tensor([0, 3, 6]), "start at 0 and end at N = 7, got 0 ... 6"),
    "past N": (torch.tensor([0, 3, 8]), "end at N = 7"),
    "decreasing": (torch.tensor([0, 5, 3, 7]), "never decrease.*got 5 then 3 at index 2"),
    "another device": (torch.tensor([0, 3, 7], device="meta"), "on the CPU or on the inputs' device cpu, got meta"),
}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("op", OPS)
def test_bad_cu_seqlens(op, case):
    cu_seqlens, message = BAD[case]
    with pytest.raises(ValueError, match=message):
        call(op, cu_seqlens)


@pytest.mark.parametrize("op", OPS)
def test_a_batch_of_more_than_one_row(op):
    with pytest.raises(ValueError, match=r"packed in one row: q must be \(1, H, N, C\), got \(2, 2, 7, 5\)"):
        call(op, torch.tensor([0, 3, 7]), batch=2)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("op", OPS)
def test_an_initial_state_per_document(op, rows):
    with pytest.raises(ValueError, match=f"one state per document: its batch must be D = 2 .*got shape \\({rows},"):
        call(op, torch.tensor([0, 3, 7]), state_rows=rows)


@pytest.mark.parametrize("op", OPS)
def test_int32_boundaries_and_a_state_per_document_are_taken(op):
    call(op, torch.tensor([0, 3, 7], dtype=torch.int32), state_rows=2)


def test_the_bidirectional_decayed_attention_takes_no_boundaries():
    from lintf.ops import decayed_linear_attention

    x = draw("decayed_linear_attention", LENGTHS)["leaves"]
    with pytest.raises(ValueError, match="cu_seqlens needs causal=True, got causal=False"):
        decayed_linear_attention(x["q"], x["k"], x["v"], x["log_decay"], causal=False,
                                 cu_seqlens=torch.tensor([0, 3, 7]))
