"""Reversible residual layers (Gomez et al. 2017, as in Reformer): activations recomputed, not stored.

A block maps a pair (X1, X2) to ``Y1 = X1 + f(X2)``, ``Y2 = X2 + g(Y1)`` (f: the attention
branch, g: the feed-forward branch), so its inputs follow from its outputs:
``X2 = Y2 - g(Y1)``, ``X1 = Y1 - f(X2)``. ``reversible_sequence`` runs a stack of blocks keeping
only the last pair; the backward walks the stack in reverse, recomputing each block's inputs and
its branches' graphs one block at a time. Training memory then holds one block's activations
whatever the depth, for about one more forward pass of compute. The branches see the random
state (dropout) and the autocast setting they saw in the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ReversibleBlock:
    """One reversible coupling ``Y1 = X1 + f(X2)``, ``Y2 = X2 + g(Y1)``.

    Args:
        f: the first branch, (..., d) -> (..., d) (in a transformer, attention with its norm and dropout).
        g: the second branch, (..., d) -> (..., d) (the feed-forward with its norm and dropout).
        parameters: every tensor f and g read that may need a gradient (their modules' parameters).
    """

    f: Callable[[Tensor], Tensor]
    g: Callable[[Tensor], Tensor]
    parameters: tuple[Tensor, ...]

    def __call__(self, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
        y1 = x1 + self.f(x2)
        return y1, x2 + self.g(y1)

    def inverse(self, y1: Tensor, y2: Tensor) -> tuple[Tensor, Tensor]:
        """The inputs (X1, X2) that gave the outputs (Y1, Y2)."""
        x2 = y2 - self.g(y1)
        return y1 - self.f(x2), x2


@dataclass(frozen=True)
class RandomState:
    """The CPU generator's state and that of the CUDA device the inputs live on (if any), to replay dropout."""

    cpu: Tensor
    cuda: Tensor | None
    device: torch.device

    @classmethod
    def capture(cls, device: torch.device) -> RandomState:
        return cls(torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None, device)

    def replay(self, branch: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
        """branch(x) drawing the random numbers it drew when this state was captured; the global state is kept."""
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            return branch(x)


def reversible_sequence(blocks: Sequence[ReversibleBlock], x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
    """Run ``blocks`` in order on the pair (x1, x2).

    With autograd recording, the intermediate pairs and the branches' activations are not kept:
    the backward recomputes them block by block from the last pair. Without gradients this is the
    plain loop.

    Args:
        blocks: the couplings, first to last.
        x1: (..., d) first half of the input pair (a transformer passes its input twice).
        x2: (..., d) second half.

    Returns:
        the last pair (Y1, Y2).
    """
    parameters = [p for block in blocks for p in block.parameters]
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (x1, x2, *parameters)):
        for block in blocks:
            x1, x2 = block(x1, x2)
        return x1, x2
    return _Reversible.apply(x1, x2, tuple(blocks), *parameters)


def _trainable(block: ReversibleBlock) -> list[Tensor]:
    return [p for p in block.parameters if p.requires_grad]


class _Reversible(torch.autograd.Function):
    """Forward without a graph; backward reconstructs each block's inputs and differentiates it alone."""

    @staticmethod
    def forward(ctx, x1: Tensor, x2: Tensor, blocks: tuple[ReversibleBlock, ...], *parameters: Tensor):
        device_type = x1.device.type
        ctx.blocks, ctx.autocast = blocks, (device_type, torch.is_autocast_enabled(device_type),
                                            torch.get_autocast_dtype(device_type))
        ctx.random_states = []
        for block in blocks:  # under no_grad: autograd.Function runs forward without recording
            before_f = RandomState.capture(x1.device)
            y1 = x1 + block.f(x2)
            before_g = RandomState.capture(x1.device)
            x1, x2 = y1, x2 + block.g(y1)
            ctx.random_states.append((before_f, before_g))
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y1: Tensor, grad_y2: Tensor):
        y1, y2 = ctx.saved_tensors
        device_type, enabled, dtype = ctx.autocast
        parameter_grads: list[Tensor | None] = []
        for block, (before_f, before_g) in zip(reversed(ctx.blocks), reversed(ctx.random_states)):
            trainable = _trainable(block)
            with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
                y1 = y1.detach().requires_grad_()
                g_out = before_g.replay(block.g, y1)
            grads_g = torch.autograd.grad(g_out, (y1, *trainable), grad_y2, allow_unused=True)
            grad_y1 = grad_y1 + grads_g[0]  # Y1 reaches the loss directly and through g
            x2 = (y2 - g_out).detach().requires_grad_()
            with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
                f_out = before_f.replay(block.f, x2)
            grads_f = torch.autograd.grad(f_out, (x2, *trainable), grad_y1, allow_unused=True)
            grad_y2 = grad_y2 + grads_f[0]  # X2 reaches Y2 directly and Y1 through f
            y1, y2 = (y1 - f_out).detach(), x2.detach()  # this block's inputs: the next block back's outputs
            summed = iter([_add(a, b) for a, b in zip(grads_g[1:], grads_f[1:])])
            parameter_grads = [next(summed) if p.requires_grad else None for p in block.parameters] + parameter_grads
        return grad_y1, grad_y2, None, *parameter_grads


def _add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None:
        return b
    return a if b is None else a + b
