"""Checks of the ops' arguments: a ValueError naming the value and what is allowed."""

from __future__ import annotations

import numbers
import sys

import torch
from torch import Tensor


def values_readable(tensor: Tensor) -> bool:
    """Whether a check may read tensor's values back now (on a GPU the host then waits for it).

    Not for an empty tensor, not while torch.compile traces (the traced graph takes no data-dependent
    branch) and not while a CUDA graph is being captured (a read-back there would end the capture): the
    value checks of the ops (log-decays, gates, delta-rule steps) are left out in those cases.

    Args:
        tensor: the tensor a check would read.
    """
    if tensor.numel() == 0 or torch.compiler.is_compiling():
        return False
    return not (tensor.is_cuda and torch.cuda.is_current_stream_capturing())


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
