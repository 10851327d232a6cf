"""Checks of constructor arguments shared by attentions: a ValueError naming the value and what is allowed."""

from __future__ import annotations

import math


def positive_int(owner: str, name: str, value: object) -> int:
    """``value`` if it is a positive int, else a ValueError naming it.

    Args:
        owner: the attention's name, used in the message.
        name: the argument's name.
        value: the given value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return value


def non_negative(owner: str, name: str, value: object) -> float:
    """``value`` as a float if it is a finite number >= 0, else a ValueError naming it.

    Args:
        owner: the attention's name, used in the message.
        name: the argument's name.
        value: the given value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)
