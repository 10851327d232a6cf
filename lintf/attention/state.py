"""The decoding state of an attention: one NamedTuple type per kind of state, passed on unchanged.

An attention's state is the NamedTuple its ``init_state`` returns: the op's own state for the
attentions that run a recurrent op (``lintf.ops.LinearAttentionState`` for ``linear`` and
``gated_linear``), a ``KVCache`` for the attentions that keep every past key, or a type of the
attention's own (``local``'s window, ``aft``'s running sums, ...). The same object travels from the
op through the attention, the layer and the encoder (a tuple of per-layer states) to the task, and
each state type is validated once: op states by the op that consumes them, the others here, against
``init_state`` built on the meta device (nothing allocated). Cache entries grow along their time
dimension (dim 2), so only their other dimensions are fixed, and they must hold at least ``length``
positions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

State = Any
"""An attention's state: the NamedTuple type its ``init_state`` returns (see the module docstring)."""


class KVCache(NamedTuple):
    """Every past key and value of a sequence, with the padding flag of each key.

    Args:
        keys: (B, H, capacity, D); positions ``length`` and after are unused space.
        values: (B, H, capacity, M).
        padding: (B, 1, capacity) bool, True marks a key never to attend.
        length: the positions cached.
    """

    keys: Tensor
    values: Tensor
    padding: Tensor
    length: int


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
        raise ValueError(f"{owner}: state.{key} must be {expected}, got {type(got).__name__}")
    if growing:
        shape_ok = got.dim() == want.dim() and got.shape[:2] == want.shape[:2] and got.shape[3:] == want.shape[3:]
        shape_ok = shape_ok and got.shape[2] >= length
    else:
        shape_ok = got.shape == want.shape
    if not shape_ok or got.dtype != want.dtype or got.device != device:
        raise ValueError(
            f"{owner}: state.{key} must be {expected}, got shape {tuple(got.shape)}, dtype {got.dtype}, "
            f"device {got.device}"
        )


def _cache_length(owner: str, state: tuple) -> int:
    """The int ``length`` of a cache state, or a ValueError saying what was expected."""
    length = getattr(state, "length", None)
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"{owner}: state.length must be an int >= 0 (positions cached), got {length!r}")
    return length


def check_state_type(owner: str, state: object, expected: tuple) -> None:
    """Raise ValueError unless ``state`` is of the NamedTuple type of ``expected`` (``init_state``'s)."""
    if type(state) is not type(expected):
        kind = type(expected).__name__
        raise ValueError(
            f"{owner}: state must be a {kind}({', '.join(expected._fields)}) as init_state, step and "
            f"forward(return_state=True) return, got {type(state).__name__}"
        )


def check_state(
    owner: str, state: object, expected: tuple, device: torch.device, cache_entries: tuple[str, ...]
) -> None:
    """Raise ValueError unless ``state`` has the type, shapes, dtypes and device of ``expected``.

    Args:
        owner: name used in messages (the attention's class name).
        state: the state given by the caller.
        expected: ``init_state`` for the call's batch, heads, value size and dtype (any device).
        device: the device of the call's inputs, which the state must share.
        cache_entries: fields whose dim 2 grows with time and holds ``state.length`` positions.
    """
    check_state_type(owner, state, expected)
    length = _cache_length(owner, state) if cache_entries else None
    for key, want in zip(expected._fields, expected):
        got = getattr(state, key)
        if isinstance(want, Tensor):
            _check_tensor(owner, key, got, want, device, length if key in cache_entries else None)
        elif isinstance(want, int) and (isinstance(got, bool) or not isinstance(got, int)):
            raise ValueError(f"{owner}: state.{key} must be an int, got {type(got).__name__}")
        elif not isinstance(got, type(want)):
            raise ValueError(f"{owner}: state.{key} must be a {type(want).__name__}, got {type(got).__name__}")
