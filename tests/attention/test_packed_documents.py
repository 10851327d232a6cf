"""Packed documents (``cu_seqlens``) for every registered attention (plugins included).

The reference is each document run alone: a packed row must give the same outputs and gradients,
causal and not, and its states (batch = documents) must continue each document as its own state does.
"""

from __future__ import annotations

import pytest
import torch

from lintf.attention.documents import per_sequence_fields, select_document
from lintf.registry import ATTENTIONS
from tests.conftest import attention_names, build, causal_attention_names, qkv_for

LENGTHS = (5, 1, 7, 3)  # a one-position document, and boundaries inside and across local's window of 4
TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def boundaries(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def packed_inputs(attention, lengths=LENGTHS, heads: int = 2):
    q, k, v = qkv_for(attention, batch=1, heads=heads, n=sum(lengths), m=6)
    return tuple(t.double().requires_grad_() for t in (q, k, v))


def documents(tensors, lengths):
    """Each document's positions of the packed (1, H, N, F) tensors."""
    return [tuple(t.split(list(lengths), dim=2)[index] for t in tensors) for index in range(len(lengths))]


def alone(attention, q, k, v, lengths, causal: bool, seed: int = 7) -> torch.Tensor:
    """Each document run by itself, the outputs concatenated: (1, H, N, M)."""
    torch.manual_seed(seed)
    return torch.cat([attention(*doc, causal=causal) for doc in documents((q, k, v), lengths)], dim=2)


def packed(attention, q, k, v, lengths, causal: bool, seed: int = 7, **kwargs):
    torch.manual_seed(seed)
    return attention(q, k, v, causal=causal, cu_seqlens=boundaries(lengths), **kwargs)


def build_packed(name: str, causal: bool):
    attention = build(name, window=4) if name == "local" else build(name)
    if causal and not attention.supports_causal:
        pytest.skip(f"{name} is non-causal only")
    return attention.double()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", attention_names())
def test_packed_equals_each_document_alone(name, causal):
    attention = build_packed(name, causal)
    q, k, v = packed_inputs(attention)
    want = alone(attention, q, k, v, LENGTHS, causal)
    got = packed(attention, q, k, v, LENGTHS, causal)
    torch.testing.assert_close(got, want, **TIGHT)
    upstream = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, (q, k, v), upstream, allow_unused=True)
    got_grads = torch.autograd.grad(got, (q, k, v), upstream, allow_unused=True)
    for a, b in zip(got_grads, want_grads):
        if a is None or b is None:  # an attention that ignores k (shared query-key) in both
            assert (a is None or not a.any()) and (b is None or not b.any())
        else:
            torch.testing.assert_close(a, b, **TIGHT)


def exact_causal_names() -> list[str]:
    return [n for n in causal_attention_names() if ATTENTIONS.get(n).continues_exactly]


def assert_same_state(got, want, cache_entries):
    for key, a, b in zip(want._fields, got, want):
        if isinstance(b, torch.Tensor):
            if key in cache_entries:  # only the cached positions count, not the spare capacity
                a, b = a[:, :, : want.length], b[:, :, : want.length]
            torch.testing.assert_close(a, b, **TIGHT)
        else:
            assert a == b


@pytest.mark.parametrize("name", exact_causal_names())
def test_packed_states_continue_each_document(name):
    attention = build_packed(name, causal=True)
    cache = bool(attention.cache_entries)  # one cache length for every document: equal lengths
    first, second = ((5, 5, 5), (3, 3, 3)) if cache else ((5, 7, 1), (3, 1, 6))
    q1, k1, v1 = packed_inputs(attention, first)
    q2, k2, v2 = packed_inputs(attention, second)
    out1, state = packed(attention, q1, k1, v1, first, True, return_state=True)
    out2, state = packed(attention, q2, k2, v2, second, True, state=state, return_state=True)
    pieces1, pieces2 = documents((out1,), first), documents((out2,), second)
    per_sequence = per_sequence_fields(attention.init_state, q1.shape[1], v1.shape[3], q1.dtype)
    for index, (doc1, doc2) in enumerate(zip(documents((q1, k1, v1), first), documents((q2, k2, v2), second))):
        whole = [torch.cat([a, b], dim=2) for a, b in zip(doc1, doc2)]
        want, want_state = attention(*whole, causal=True, return_state=True)
        torch.testing.assert_close(torch.cat([pieces1[index][0], pieces2[index][0]], dim=2), want, **TIGHT)
        assert_same_state(select_document(state, index, per_sequence), want_state, attention.cache_entries)


def test_a_cache_state_of_unequal_documents_is_refused():
    attention = build_packed("softmax", causal=True)
    q, k, v = packed_inputs(attention, (3, 4))
    with pytest.raises(ValueError, match="equal length"):
        packed(attention, q, k, v, (3, 4), True, return_state=True)


@pytest.mark.parametrize("name", ["softmax", "linear", "clustered"])
def test_bad_packed_inputs_are_refused(name):
    attention = build_packed(name, causal=False)
    q, k, v = packed_inputs(attention, (3, 4))
    with pytest.raises(ValueError, match="rise strictly from 0 to N = 7"):
        attention(q, k, v, causal=False, cu_seqlens=torch.tensor([0, 3, 6]))
    with pytest.raises(ValueError, match="rise strictly"):
        attention(q, k, v, causal=False, cu_seqlens=torch.tensor([0, 3, 3, 7]))
    with pytest.raises(ValueError, match="1-D int32/int64"):
        attention(q, k, v, causal=False, cu_seqlens=torch.tensor([0.0, 3.0, 7.0]))
    with pytest.raises(ValueError, match="no padding"):
        attention(q, k, v, causal=False, cu_seqlens=boundaries((3, 4)), key_padding_mask=torch.zeros(1, 7).bool())
    two_rows = [torch.cat([t, t]) for t in (q, k, v)]
    with pytest.raises(ValueError, match=r"one row of N positions: q, k, v must be \(1, H, N"):
        attention(*two_rows, causal=False, cu_seqlens=boundaries((3, 4)))


def packed_natively() -> list[str]:
    return [n for n in causal_attention_names() if ATTENTIONS.get(n).supports_packed]


def test_the_recurrent_softmax_and_local_attentions_take_packed_documents_natively():
    assert {"softmax", "local", "linear", "gated_linear", "retention", "gla", "delta_net",
            "gated_delta_net"} <= set(packed_natively())


@pytest.mark.parametrize("name", packed_natively())
def test_a_native_causal_packed_call_runs_once_for_the_whole_row(name, monkeypatch):
    attention = build_packed(name, causal=True)

    def refuse(*args, **kwargs):
        raise AssertionError(f"{name} ran its documents one at a time")

    monkeypatch.setattr(attention, "attend_documents", refuse)
    q, k, v = packed_inputs(attention)
    assert packed(attention, q, k, v, LENGTHS, True).shape == v.shape


@pytest.mark.parametrize("causal", [True, False])
def test_softmax_attends_packed_documents_in_chunks_of_whole_documents(causal, monkeypatch):
    monkeypatch.setattr("lintf.attention.softmax.PACKED_CHUNK", 6)  # chunks (5, 1), (7), (3): one longer than 6
    attention = build_packed("softmax", causal)
    q, k, v = packed_inputs(attention)
    want = alone(attention, q, k, v, LENGTHS, causal)
    got = packed(attention, q, k, v, LENGTHS, causal)
    torch.testing.assert_close(got, want, **TIGHT)
    upstream = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), upstream), torch.autograd.grad(want, (q, k, v), upstream)):
        torch.testing.assert_close(a, b, **TIGHT)
