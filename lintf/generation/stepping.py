"""The recurrent step as one compiled graph: fewer, fused kernels per token, the same outputs.

A token's step runs a few dozen small operations per layer, so in eager mode much of its time goes
to launching them one by one. ``CompiledStep`` hands ``AutoregressiveTask.step`` to
``torch.compile``, which fuses the element-wise work between the matrix products. Compiling takes
seconds to a minute once per process; where it cannot happen (no C++ compiler, an unsupported
platform or operation), a warning says why and the eager step is used.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

from lintf.attention.base import State
from lintf.generation.sampling import StepFunction
from lintf.tasks.autoregressive import AutoregressiveTask


class CompiledStep:
    """``task.step`` compiled on its first call; the eager step if compiling fails.

    Args:
        task: the model to step.
    """

    def __init__(self, task: AutoregressiveTask) -> None:
        self.task = task
        self.step: StepFunction = torch.compile(task.step, dynamic=True)
        self.compiled: bool | None = None  # None until the first call tells

    def __call__(self, token: Tensor, position: int, state: Sequence[State]) -> tuple[Tensor, tuple[State, ...]]:
        if self.compiled is not None:
            return self.step(token, position, state)
        try:
            result = self.step(token, position, state)
        except Exception as error:  # noqa: BLE001  (any failure of the compiler means: run eagerly)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            warnings.warn(f"torch.compile of the step failed ({type(error).__name__}: {reason[:300]}); "
                          "generating with the eager step", stacklevel=2)
            self.step, self.compiled = self.task.step, False
            return self.step(token, position, state)
        self.compiled = True
        return result

