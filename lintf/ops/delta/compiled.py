"""The compiled op ``lintf::delta_rule``: when it serves, how to call it, and its fake, autograd and autocast rules.

The schema lives in ``csrc/delta/delta_rule.cpp``, the kernels beside it (CPU:
``csrc/delta/cpu/delta_rule_cpu.cpp``; CUDA: ``csrc/delta/cuda/delta_rule_cuda.cu``, fp32, fp16 and bf16 up to
128 features on compute capability 8.0+: ``takes``), built and loaded with the rest of the library by
``lintf.ops.extension``::

    lintf::delta_rule(q, k, v, beta, log_decay, scale, initial_state=None) -> (out, final_state)
    lintf::delta_rule_backward(grad_out, q, k, v, beta, log_decay, scale, initial_state=None, grad_state=None)
        -> (dq, dk, dv, d_beta, d_log_decay, d_initial_state)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M), all fp16, bf16, fp32 or fp64; beta and the
optional log_decay (B, H, N), the states (B, H, C, M) and their gradients in the accumulation dtype
(fp32, fp64 for fp64 inputs); d_log_decay is empty without log_decay. The first backward runs the
compiled ``delta_rule_backward`` (its memory grows as N (C M / 32 + M + 64) values per thread on the CPU, as the chunks'
states and L x L matrices on CUDA, not with the graph of a chunked PyTorch pass); a backward that records a graph of its own (``create_graph=True``)
differentiates the pure-PyTorch chunked path instead. Under autocast the op runs in the autocast
dtype and keeps fp32 states. The extension runs ``register_python_parts`` once the library is
loaded (``on_load``, below).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.common import compiled_op
from lintf.ops.common.compiled_op import fake_state
from lintf.ops.common.recorded_gradients import recorded_gradients
from lintf.ops.delta.chunked import delta_rule_chunked

_NAME = "delta_rule"


def serves(device: torch.device) -> bool:
    """Whether the compiled op runs tensors on device: CPU or CUDA tensors, the library loaded for the device (on
    CUDA: built with its CUDA kernels) and LINTF_EXTENSION not off."""
    return compiled_op.serves(_NAME, device, ("cpu", "cuda"))


def takes(q: Tensor, v: Tensor) -> bool:
    """Whether the kernels of q's device take q, v (on CUDA: fp32, fp16, bf16, C <= 128, compute capability 8.0+,
    within the GPU's shared memory per block; ``compiled_op.takes``)."""
    return compiled_op.takes(_NAME, q, v)


def delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, scale: float,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Run the compiled op on validated inputs (beta, log_decay, initial_state in the accumulation dtype)."""
    return torch.ops.lintf.delta_rule(q, k, v, beta, log_decay, scale, initial_state)


def _fake_forward(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, scale: float,
    initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    return v.new_empty(v.shape), fake_state(q, v)


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, scale: float,
    initial_state: Tensor | None = None, grad_state: Tensor | None = None,
) -> tuple[Tensor, ...]:
    d_log_decay = beta.new_empty(beta.shape if log_decay is not None else (0,))
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), beta.new_empty(beta.shape),
            d_log_decay, fake_state(q, v))


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:  # noqa: ANN001 (torch ctx)
    q, k, v, beta, log_decay, scale, initial_state = inputs
    ctx.save_for_backward(q, k, v, beta, log_decay, initial_state)
    ctx.scale = scale
    ctx.set_materialize_grads(False)  # an unused final state costs no zero-filled gradient


def _backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001 (torch ctx)
    q, k, v, beta, log_decay, initial_state = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _recorded_backward(ctx, grad_out, grad_state)
    if grad_out is None:
        grad_out = torch.zeros_like(v)
    dq, dk, dv, d_beta, d_log_decay, d_state = torch.ops.lintf.delta_rule_backward(
        grad_out, q, k, v, beta, log_decay, ctx.scale, initial_state, grad_state
    )
    return (dq, dk, dv, d_beta, None if log_decay is None else d_log_decay, None,
            None if initial_state is None else d_state)


def _recorded_backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001
    """Gradients as a differentiable function of the inputs and of the incoming gradients."""
    q, k, v, beta, log_decay, initial_state = ctx.saved_tensors
    acc = beta.dtype
    outputs = delta_rule_chunked(q.to(acc), k.to(acc), v.to(acc), beta, log_decay, ctx.scale, initial_state)
    incoming = [None if g is None else g.to(o.dtype) for o, g in zip(outputs, (grad_out, grad_state))]
    inputs = (q, k, v, beta, log_decay, None, initial_state)
    return recorded_gradients(outputs, incoming, inputs, ctx.needs_input_grad)


def register_python_parts() -> None:
    """Register the fake, autograd and autocast rules of the loaded op, if the library defines it (idempotent)."""
    compiled_op.register_rules(_NAME, _fake_forward, _fake_backward, _backward, _setup_context, autocast=True)


extension.on_load(register_python_parts)
