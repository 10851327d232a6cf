"""Checks of the ops' arguments: a ValueError naming the value and what is allowed.

Checks of values (gates, decays, delta-rule steps) read nothing back on a GPU: there they are device-side
assertions (``check_range``), so a training step never waits for the device.
"""

from __future__ import annotations

import numbers
import sys

import torch
from torch import Tensor


def values_checked(tensor: Tensor) -> bool:
    """Whether a value check of ``tensor`` runs now: not for an empty tensor, not while torch.compile traces.

    The traced graph takes no data-dependent branch, so the compiled op's value checks are left out.

    Args:
        tensor: the tensor a check would read.
    """
    return tensor.numel() > 0 and not torch.compiler.is_compiling()


def reads_without_waiting(tensor: Tensor) -> bool:
    """Whether the host reads ``tensor``'s values without waiting for a device: on the CPU only.

    Elsewhere (CUDA) a read-back makes the host wait for every kernel queued before it, so every layer
    of every training step would stall; checks there become device-side assertions instead.

    Args:
        tensor: the tensor a check would read.
    """
    return tensor.device.type == "cpu"


def check_range(owner: str, name: str, tensor: Tensor, low: float | None, high: float, allowed: str) -> None:
    """Refuse a value of ``tensor`` outside [low, high] (NaN passes, as it passes every comparison).

    On the CPU a ValueError naming the range of the values found. On a device, where reading the values
    back would stall the host, a device-side assertion (``torch._assert_async``) with the same message:
    the host does not wait, and a bad value stops the device at its next synchronisation with a CUDA
    error ("device-side assert triggered"); the CUDA context is unusable after it, as after any device
    assertion. Left out where ``values_checked`` says no (empty tensors, torch.compile tracing).

    Args:
        owner: the op, for messages.
        name: the argument's name, for messages.
        tensor: the values to check.
        low: the smallest allowed value, None for no lower bound.
        high: the largest allowed value.
        allowed: the allowed values in words, for messages ("<= 0 (decays in (0, 1])").

    Raises:
        ValueError: on the CPU, a value lies outside [low, high].
    """
    if not values_checked(tensor):
        return
    outside = tensor > high
    if low is not None:
        outside |= tensor < low
    if not reads_without_waiting(tensor):
        torch._assert_async(outside.any().logical_not(), f"{owner}: {name} must be {allowed}")
    elif bool(outside.any()):
        raise ValueError(
            f"{owner}: {name} must be {allowed}, got values from {tensor.min().item():g} to {tensor.max().item():g} "
            f"(shape {tuple(tensor.shape)})"
        )


def check_eps(owner: str, eps: object) -> float:
    """``eps`` as a float if it is a finite number >= 0, else a ValueError naming it.

    Traceable by ``torch.compile(fullgraph=True)``, also when eps becomes a symbolic float: the test
    uses comparisons only (``math.isfinite`` cannot take a symbolic float), and the value is formatted
    only on the failing branch.

    Args:
        owner: the op's name, used in the message.
        eps: the given value.

    Raises:
        ValueError: eps is not a real number, or it is NaN, infinite or negative.
    """
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise ValueError(f"{owner}: eps must be a finite number >= 0, got {eps!r}")
    value = float(eps)
    if not 0 <= value <= sys.float_info.max:  # NaN fails both comparisons
        raise ValueError(f"{owner}: eps must be a finite number >= 0, got {value}")
    return value
