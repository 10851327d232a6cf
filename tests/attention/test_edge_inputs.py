"""Edge inputs for every registered attention: empty batches and sequences, NaN queries, bad eps."""

from __future__ import annotations

import pytest
import torch

from lintf.registry import ATTENTIONS, accepted_arguments, build_attention
from tests.conftest import HEAD_DIM, attention_names, build, causal_attention_names, qkv_for, run_seeded


def modes(name: str) -> list[bool]:
    return [True, False] if ATTENTIONS.get(name).supports_causal else [False]


def cases(names: list[str]) -> list[tuple[str, bool]]:
    return [(name, causal) for name in names for causal in modes(name)]


@pytest.mark.parametrize("name, causal", cases(attention_names()))
@pytest.mark.parametrize("batch, n", [(2, 0), (0, 6)])
def test_empty_inputs_give_empty_outputs(name, causal, batch, n):
    attention = build(name)
    q, k, v = (t.requires_grad_() for t in qkv_for(attention, batch=batch, n=n))
    out = run_seeded(attention, q, k, v, causal=causal)
    assert out.shape == (batch, 3, n, v.shape[-1]) and out.dtype == v.dtype


def cross_attention_names() -> list[str]:
    return [n for n in attention_names() if not (build(n).shares_query_key or build(n).self_attention_only)]


@pytest.mark.parametrize("name", cross_attention_names())
def test_no_queries_against_some_keys_give_an_empty_output(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=0, s=5)
    assert run_seeded(attention, q, k, v, causal=False).shape == (2, 3, 0, v.shape[-1])


@pytest.mark.parametrize("name", causal_attention_names())
def test_an_empty_piece_leaves_the_state_as_it_was(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=10)
    _, state = run_seeded(attention, q[:, :, :6], k[:, :, :6], v[:, :, :6], causal=True, return_state=True)
    out, after = attention(q[:, :, :0], k[:, :, :0], v[:, :, :0], causal=True, state=state, return_state=True)
    assert out.shape == (2, 3, 0, v.shape[-1])
    rest = (q[:, :, 6:], k[:, :, 6:], v[:, :, 6:])
    torch.testing.assert_close(attention(*rest, causal=True, state=after), attention(*rest, causal=True, state=state))
    _, fresh = attention(q[:, :, :0], k[:, :, :0], v[:, :, :0], causal=True, return_state=True)
    empty = attention.init_state(2, 3, v.shape[-1])
    assert type(fresh) is type(empty) and fresh._fields == empty._fields


@pytest.mark.parametrize("name, causal", cases(attention_names()))
@pytest.mark.parametrize("position", [0, 6])  # causal position 0 sees only itself
def test_a_nan_query_gives_nan_at_its_position(name, causal, position):
    attention = build(name)
    q, k, v = qkv_for(attention, n=10)
    whole_vector, one_entry = q.clone(), q.clone()
    whole_vector[0, 1, position] = float("nan")
    one_entry[0, 1, position, 2] = float("nan")
    for queries, reach in ((whole_vector, "all"), (one_entry, "any")):
        out = run_seeded(attention, queries, k, v, causal=causal)
        nan_at_position = out[0, 1, position].isnan()
        assert bool(nan_at_position.all() if reach == "all" else nan_at_position.any()), (reach, out[0, 1, position])
        assert torch.isfinite(out[1]).all()  # the other sequence is untouched
        if causal:
            assert torch.isfinite(out[0, :, :position]).all()  # earlier positions never see the NaN
            state = attention.init_state(2, 3, v.shape[-1])
            for t in range(position + 1):
                out_t, state = attention.step(queries[:, :, t], k[:, :, t], v[:, :, t], state)
            assert bool(out_t[0, 1].isnan().all() if reach == "all" else out_t[0, 1].isnan().any())


@pytest.mark.parametrize("name", [n for n in attention_names() if "eps" in accepted_arguments(ATTENTIONS.get(n))])
@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
def test_eps_must_be_a_finite_non_negative_number(name, eps):
    with pytest.raises(ValueError, match=rf"eps must be a finite number >= 0, got {eps!r}"):
        build_attention(name, head_dim=HEAD_DIM, eps=eps)


def test_some_attentions_take_an_eps():
    assert {"linear", "polynomial", "gated_linear"} <= {
        n for n in attention_names() if "eps" in accepted_arguments(ATTENTIONS.get(n))
    }


@pytest.mark.parametrize("name", ["linear", "polynomial", "gated_linear"])
def test_eps_zero_is_allowed(name):
    attention = build_attention(name, head_dim=HEAD_DIM, eps=0)
    q, k, v = qkv_for(attention, n=5)
    assert torch.isfinite(attention(q, k, v, causal=True)).all()
