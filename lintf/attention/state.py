"""The decoding state of an attention, and the check of a state handed to ``forward``.

A state is a dict of tensors (plus an int ``length`` for caches). Its expected structure is that
of ``init_state`` for the call's batch, heads, value size and dtype, built on the meta device so
nothing is allocated. Cache entries grow along their time dimension (dim 2), so only their
other dimensions are fixed, and they must hold at least ``length`` positions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

State = dict[str, Any]


def _shape_text(shape: tuple[int, ...], growing: bool) -> str:
    """(2, 3, 8) or, for a cache entry, (2, 3, >=L, 8) with L its required length."""
    if not growing:
        return str(tuple(shape))
    parts = [str(size) for size in shape]
    parts[2] = f">={shape[2]}"
    return f"({', '.join(parts)})"


def _check_tensor(owner: str, key: str, got: object, want: Tensor, device: torch.device, length: int | None) -> None:
    """Raise ValueError unless ``got`` has want's dtype and shape (dim 2 >= length for caches) on device."""
    growing = length is not None
    expected_shape = tuple(want.shape) if not growing else (*want.shape[:2], length, *want.shape[3:])
    expected = f"a {want.dtype} tensor of shape {_shape_text(expected_shape, growing)} on {device}"
    if not isinstance(got, Tensor):
        raise ValueError(f"{owner}: state[{key!r}] must be {expected}, got {type(got).__name__}")
    if growing:
        shape_ok = got.dim() == want.dim() and got.shape[:2] == want.shape[:2] and got.shape[3:] == want.shape[3:]
        shape_ok = shape_ok and got.shape[2] >= length
    else:
        shape_ok = got.shape == want.shape
    if not shape_ok or got.dtype != want.dtype or got.device != device:
        raise ValueError(
            f"{owner}: state[{key!r}] must be {expected}, got shape {tuple(got.shape)}, dtype {got.dtype}, "
            f"device {got.device}"
        )


def _cache_length(owner: str, state: State) -> int:
    """The int ``length`` of a cache state, or a ValueError saying what was expected."""
    length = state.get("length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"{owner}: state['length'] must be an int >= 0 (positions cached), got {length!r}")
    return length


def check_state(
    owner: str, state: object, expected: State, device: torch.device, cache_entries: tuple[str, ...]
) -> None:
    """Raise ValueError unless ``state`` has the structure, shapes, dtypes and device of ``expected``.

    Args:
        owner: name used in messages (the attention's class name).
        state: the state given by the caller.
        expected: ``init_state`` for the call's batch, heads, value size and dtype (any device).
        device: the device of the call's inputs, which the state must share.
        cache_entries: entries whose dim 2 grows with time and holds ``state['length']`` positions.
    """
    if not isinstance(state, dict) or set(state) != set(expected):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{owner}: state must be a dict with entries {sorted(expected)} (as init_state and step return), "
            f"got {got}"
        )
    length = _cache_length(owner, state) if cache_entries else None
    for key, want in expected.items():
        got = state[key]
        if isinstance(want, Tensor):
            _check_tensor(owner, key, got, want, device, length if key in cache_entries else None)
        elif isinstance(want, int) and (isinstance(got, bool) or not isinstance(got, int)):
            raise ValueError(f"{owner}: state[{key!r}] must be an int, got {type(got).__name__}")
        elif not isinstance(got, type(want)):
            raise ValueError(f"{owner}: state[{key!r}] must be a {type(want).__name__}, got {type(got).__name__}")
