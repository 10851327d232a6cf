"""Double backward for the compiled ops: their backward kernels are not differentiable, so when autograd
needs a graph of the gradients (``create_graph=True``), the op's autograd rule recomputes its outputs on
the PyTorch path and differentiates those instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def recorded_gradients(
    outputs: Sequence[Tensor],
    incoming: Sequence[Tensor | None],
    inputs: Sequence[Tensor | None],
    needs_input_grad: Sequence[bool],
) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` (recomputed differentiably) weighted by ``incoming``, one per input.

    Args:
        outputs: the op's outputs recomputed from ``inputs`` with autograd recording.
        incoming: the gradient arriving at each output; None where none arrives.
        inputs: the op's inputs as autograd saw them; None for inputs that were not tensors.
        needs_input_grad: autograd's ``ctx.needs_input_grad``.

    Returns:
        One entry per input: a differentiable gradient (zeros where the outputs do not depend on it),
        None where none is wanted.
    """
    wanted = [i for i, needed in enumerate(needs_input_grad) if needed and inputs[i] is not None]
    pairs = [(output, grad) for output, grad in zip(outputs, incoming) if grad is not None]
    grads = torch.autograd.grad(
        [o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs], create_graph=True, allow_unused=True
    )
    result: list[Tensor | None] = [None] * len(inputs)
    for i, grad in zip(wanted, grads):
        result[i] = torch.zeros_like(inputs[i]) if grad is None else grad
    return tuple(result)


def not_differentiable(backward_op: str, forward_op: str) -> Callable[..., tuple]:
    """The autograd rule of a backward kernel: differentiating it raises, naming the op to differentiate."""

    def refuse(ctx, *grads: Tensor) -> tuple:  # noqa: ANN001 (torch ctx)
        raise RuntimeError(
            f"{backward_op} is not differentiable itself; differentiate {forward_op}, whose backward records a "
            "differentiable graph (create_graph=True) through the PyTorch path"
        )

    return refuse
