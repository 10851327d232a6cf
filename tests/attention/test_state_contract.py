"""The state contract of attention/base.py, for every registered causal attention (plugins included).

A sequence split anywhere and run piece by piece, by ``forward`` with ``state`` / ``return_state``
or by ``step``, must reproduce the unsplit ``forward`` in fp64: outputs and gradients. Attentions
declaring ``continues_exactly = False`` are held to the structure of the state only.
"""

from __future__ import annotations

import pytest
import torch

from lintf.registry import ATTENTIONS
from tests.attention.stepping import step_through
from tests.conftest import attention_names, build, causal_attention_names, qkv_for, run_seeded

N = 70
OFF_BOUNDARY = 67  # inside the second 64-position chunk of the chunked products, mid-block for local's window
SPLITS = [0, 1, N // 2, OFF_BOUNDARY, N - 1, N]
TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def exact_names() -> list[str]:
    return [n for n in causal_attention_names() if ATTENTIONS.get(n).continues_exactly]


def exact_step_names() -> list[str]:
    return [n for n in exact_names() if ATTENTIONS.get(n).step_matches_forward]


def inexact_names() -> list[str]:
    return [n for n in causal_attention_names() if not ATTENTIONS.get(n).continues_exactly]


def fp64_inputs(attention, n: int = N, grad: bool = False):
    q, k, v = (t.double().requires_grad_(grad) for t in qkv_for(attention, n=n, m=6))
    return q, k, v


def piece(tensors, start: int, stop: int | None = None):
    """Positions start..stop-1 of each (B, H, N, F) tensor."""
    return tuple(t[:, :, start:stop] for t in tensors)


def gradients(out, inputs, upstream):
    return torch.autograd.grad(out, inputs, upstream, allow_unused=True)


def assert_same_gradients(got, want):
    for a, b in zip(got, want):
        if a is None or b is None:
            assert a is None or not a.any()
            assert b is None or not b.any()
        else:
            torch.testing.assert_close(a, b, **TIGHT)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", exact_names())
def test_forward_in_two_pieces_reproduces_the_whole(name, split):
    attention = build(name).double()
    inputs = fp64_inputs(attention, grad=True)
    whole = run_seeded(attention, *inputs, causal=True)
    first, state = run_seeded(attention, *piece(inputs, 0, split), causal=True, return_state=True)
    rest = attention(*piece(inputs, split), causal=True, state=state)
    split_out = torch.cat([first, rest], dim=2)
    torch.testing.assert_close(split_out, whole, **TIGHT)
    upstream = torch.randn_like(whole)
    assert_same_gradients(gradients(split_out, inputs, upstream), gradients(whole, inputs, upstream))


@pytest.mark.parametrize("split", [0, 1, N // 2, OFF_BOUNDARY, N])
@pytest.mark.parametrize("name", exact_names())
def test_padded_sequence_in_two_pieces_reproduces_the_padded_whole(name, split):
    attention = build(name).double()
    inputs = fp64_inputs(attention, grad=True)
    padding = torch.zeros(2, N, dtype=torch.bool)
    padding[0, :3] = True  # left padding
    padding[0, 33:38] = True  # padding across the middle split
    padding[1, 60:] = True  # right padding across the late splits
    whole = run_seeded(attention, *inputs, causal=True, key_padding_mask=padding)
    first, state = run_seeded(
        attention, *piece(inputs, 0, split), causal=True, key_padding_mask=padding[:, :split], return_state=True
    )
    rest = attention(*piece(inputs, split), causal=True, key_padding_mask=padding[:, split:], state=state)
    split_out = torch.cat([first, rest], dim=2)
    torch.testing.assert_close(split_out, whole, **TIGHT)
    upstream = torch.randn_like(whole)
    assert_same_gradients(gradients(split_out, inputs, upstream), gradients(whole, inputs, upstream))


@pytest.mark.parametrize("name", exact_names())
def test_three_pieces_with_a_step_between_reproduce_the_whole(name):
    """forward -> step -> forward: each piece continues from the state the one before returned."""
    attention = build(name).double()
    inputs = fp64_inputs(attention, grad=True)
    whole = run_seeded(attention, *inputs, causal=True)
    first, state = run_seeded(attention, *piece(inputs, 0, 20), causal=True, return_state=True)
    if attention.step_matches_forward:
        middle, state = step_through(attention, *piece(inputs, 20, 24), state)
    else:
        middle, state = attention(*piece(inputs, 20, 24), causal=True, state=state, return_state=True)
    last = attention(*piece(inputs, 24), causal=True, state=state)
    split_out = torch.cat([first, middle, last], dim=2)
    torch.testing.assert_close(split_out, whole, **TIGHT)
    upstream = torch.randn_like(whole)
    assert_same_gradients(gradients(split_out, inputs, upstream), gradients(whole, inputs, upstream))


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", exact_step_names())
def test_forward_then_step_reproduces_the_whole(name, split):
    attention = build(name).double()
    inputs = fp64_inputs(attention)
    whole = run_seeded(attention, *inputs, causal=True)
    first, state = run_seeded(attention, *piece(inputs, 0, split), causal=True, return_state=True)
    rest, _ = step_through(attention, *piece(inputs, split), state)
    torch.testing.assert_close(torch.cat([first, rest], dim=2), whole, **TIGHT)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", exact_step_names())
def test_step_then_forward_reproduces_the_whole(name, split):
    attention = build(name).double()
    inputs = fp64_inputs(attention)
    whole = run_seeded(attention, *inputs, causal=True)
    torch.manual_seed(1234)  # the seed run_seeded gives the whole forward, for attentions that draw at random
    state = attention.init_state(2, 3, inputs[2].shape[-1], dtype=torch.float64)
    first, state = step_through(attention, *piece(inputs, 0, split), state)
    rest = attention(*piece(inputs, split), causal=True, state=state)
    torch.testing.assert_close(torch.cat([first, rest], dim=2), whole, **TIGHT)


@pytest.mark.parametrize("name", exact_step_names())
def test_state_after_forward_continues_like_the_state_after_steps(name):
    attention = build(name).double()
    inputs = fp64_inputs(attention, n=30)
    _, from_forward = run_seeded(attention, *piece(inputs, 0, 17), causal=True, return_state=True)
    torch.manual_seed(1234)
    from_steps = attention.init_state(2, 3, inputs[2].shape[-1], dtype=torch.float64)
    _, from_steps = step_through(attention, *piece(inputs, 0, 17), from_steps)
    rest = piece(inputs, 17)
    torch.testing.assert_close(
        attention(*rest, causal=True, state=from_forward), attention(*rest, causal=True, state=from_steps), **TIGHT
    )
    stepped_f, _ = step_through(attention, *rest, from_forward)
    stepped_s, _ = step_through(attention, *rest, from_steps)
    torch.testing.assert_close(stepped_f, stepped_s, **TIGHT)


@pytest.mark.parametrize("name", exact_names())
def test_padded_keys_of_a_prefix_do_not_reach_its_continuation(name):
    attention = build(name).double()
    q, k, v = fp64_inputs(attention, n=24)
    padding = torch.zeros(2, 16, dtype=torch.bool)
    padding[0, 3:7] = True
    padding[1, 12:] = True
    changed_k, changed_v = k.clone(), v.clone()
    hidden = padding[:, None, :].expand(-1, 3, -1)  # (B, H, 16)
    changed_k[:, :, :16][hidden] = 3.0
    changed_v[:, :, :16][hidden] = 100.0
    continuations = []
    for keys, values in ((k, v), (changed_k, changed_v)):
        _, state = run_seeded(
            attention, q[:, :, :16], keys[:, :, :16], values[:, :, :16], causal=True, key_padding_mask=padding,
            return_state=True,
        )
        continuations.append(attention(q[:, :, 16:], k[:, :, 16:], v[:, :, 16:], causal=True, state=state))
    torch.testing.assert_close(continuations[1], continuations[0], **TIGHT)


@pytest.mark.parametrize("name", causal_attention_names())
def test_returned_state_has_the_structure_of_init_state(name):
    """Every causal attention, exact or not: the state from forward feeds forward and step alike."""
    attention = build(name)
    q, k, v = qkv_for(attention, n=20)
    first, state = run_seeded(attention, q[:, :, :12], k[:, :, :12], v[:, :, :12], causal=True, return_state=True)
    expected = attention.init_state(2, 3, v.shape[-1])
    assert type(state) is type(expected) and state._fields == expected._fields
    rest, state = attention(q[:, :, 12:], k[:, :, 12:], v[:, :, 12:], causal=True, state=state, return_state=True)
    out_t, state = attention.step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
    last = attention(q[:, :, :3], k[:, :, :3], v[:, :, :3], causal=True, state=state)
    assert first.shape == (2, 3, 12, v.shape[-1]) and rest.shape == (2, 3, 8, v.shape[-1])
    assert out_t.shape == (2, 3, v.shape[-1]) and last.shape == (2, 3, 3, v.shape[-1])
    assert all(torch.isfinite(t).all() for t in (first, rest, out_t, last))


@pytest.mark.parametrize("name", inexact_names())
def test_inexact_attentions_say_why(name):
    assert "continues_exactly" in (ATTENTIONS.get(name).__doc__ or "")


@pytest.mark.parametrize("name", attention_names())
def test_state_and_return_state_need_causal(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=6)
    state = attention.init_state(2, 3, v.shape[-1]) if attention.supports_causal else {}
    expected = "need causal=True" if attention.supports_causal else "non-causal only, so it has no state"
    with pytest.raises(ValueError, match=expected):
        attention(q, k, v, causal=False, state=state)
    with pytest.raises(ValueError, match=expected):
        attention(q, k, v, causal=False, return_state=True)


SHAPE_REFUSED = r"state\.\w+ must (be a torch\.\w+ tensor of shape|have shape) \(2, 3, "
"""An attention-level state check or the op's (for the op's own state type) names the expected shape."""


@pytest.mark.parametrize("name", causal_attention_names())
def test_a_state_of_another_shape_is_rejected_naming_the_expected_one(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=6)
    with pytest.raises(ValueError, match=SHAPE_REFUSED):
        attention(q, k, v, causal=True, state=attention.init_state(1, 3, v.shape[-1]))
    if attention.value_dim_is_head_dim:
        return  # init_state itself refuses another value size
    with pytest.raises(ValueError, match=SHAPE_REFUSED):
        attention(q, k, v, causal=True, state=attention.init_state(2, 3, v.shape[-1] + 1))


@pytest.mark.parametrize("name", causal_attention_names())
def test_a_state_of_another_structure_dtype_or_device_is_rejected(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=6)
    state = attention.init_state(2, 3, v.shape[-1])
    kind = type(state).__name__
    with pytest.raises(ValueError, match=f"state must be a {kind}"):
        attention(q, k, v, causal=True, state=tuple(state))
    with pytest.raises(ValueError, match=f"state must be a {kind}"):
        attention(q, k, v, causal=True, state=dict(state._asdict()))
    floats = [key for key, t in state._asdict().items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert floats, f"{name}: a state without a float tensor"
    field = floats[0]
    other_dtype = state._replace(**{field: getattr(state, field).double()})
    message = (rf"state\.{field} must (be a torch.float32 tensor .*dtype torch.float64|have the accumulation dtype "
               rf"torch.float32 .*got torch.float64)")
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, causal=True, state=other_dtype)
    other_device = state._replace(**{field: torch.empty_like(getattr(state, field), device="meta")})
    with pytest.raises(ValueError, match=rf"state\.{field} must (be .* on cpu, got .*device meta|be on the inputs' "
                                         rf"device cpu, got meta)"):
        attention(q, k, v, causal=True, state=other_device)


@pytest.mark.parametrize("name", [n for n in causal_attention_names() if ATTENTIONS.get(n).cache_entries])
def test_a_cache_shorter_than_its_length_is_rejected(name):
    attention = build(name)
    q, k, v = qkv_for(attention, n=6)
    state = attention.init_state(2, 3, v.shape[-1])
    capacity = getattr(state, attention.cache_entries[0]).shape[2]
    with pytest.raises(ValueError, match=rf"must be .* of shape \(2, 3, >={capacity + 1}"):
        attention(q, k, v, causal=True, state=state._replace(length=capacity + 1))
    with pytest.raises(ValueError, match=r"state\.length must be an int >= 0"):
        attention(q, k, v, causal=True, state=state._replace(length=-1))
