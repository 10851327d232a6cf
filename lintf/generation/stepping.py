"""The recurrent step as one compiled graph: fewer, fused kernels per token, the same outputs.

A token's step runs a few dozen small operations per layer, so in eager mode much of its time goes
to launching them one by one. ``CompiledStep`` hands the step's encoder and head (``AutoregressiveTask.advance``) to
``torch.compile``, which fuses the element-wise work between the matrix products; the token's
embedding and position code stay eager, so one graph serves every position. Compiling takes
seconds to a minute once per process; where it cannot happen (no C++ compiler, an unsupported
platform or operation), a warning says why and the eager step is used.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

from lintf.attention.base import State
from lintf.tasks.autoregressive import AutoregressiveTask


class CompiledStep:
    """``task.step`` with its position-free part (``task.advance``) compiled on the first call; eager if that fails.

    Args:
        task: the model to step.
    """

    def __init__(self, task: AutoregressiveTask) -> None:
        self.task = task
        self.advance = torch.compile(task.advance, dynamic=True)
        self.compiled: bool | None = None  # None until the first call tells

    def __call__(self, token: Tensor, position: int, state: Sequence[State]) -> tuple[Tensor, tuple[State, ...]]:
        x_t = self.task.step_input(token, position)  # (B, d_model); positions stay out of the graph
        if self.compiled is not None:
            return self.advance(x_t, state)
        try:
            result = self.advance(x_t, state)
        except Exception as error:  # noqa: BLE001  (any failure of the compiler means: run eagerly)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            warnings.warn(f"torch.compile of the step failed ({type(error).__name__}: {reason[:300]}); "
                          "generating with the eager step", stacklevel=2)
            self.advance, self.compiled = self.task.advance, False
            return self.advance(x_t, state)
        self.compiled = True
        return result
