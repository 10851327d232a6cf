"""The compiled op ``lintf::decayed_product``: when it serves, how to call it, and its fake and autograd rules.

The schema lives in ``csrc/decayed/decayed_product.cpp``, the CPU kernel beside it
(``csrc/decayed/cpu/decayed_product_cpu.cpp``), built and loaded with the rest of the library by
``lintf.ops.extension``::

    lintf::decayed_product(q, k, v, log_decay, initial_state=None) -> (out, final_state)
    lintf::decayed_product_backward(grad_out, q, k, v, log_decay, initial_state=None, grad_state=None)
        -> (dq, dk, dv, d_log_decay, d_initial_state)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M), all fp16, bf16, fp32 or fp64; log_decay
(B, H, N) <= 0, the states (B, H, C, M) and their gradients in the accumulation dtype (fp32, fp64
for fp64 inputs). The first backward runs the compiled ``decayed_product_backward`` (memory
independent of N beyond inputs and gradients); a backward that records a graph of its own
(``create_graph=True``) differentiates the pure-PyTorch chunked path instead. The extension runs
``register_python_parts`` once the library is loaded (``on_load``, below).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.common.recorded_gradients import not_differentiable, recorded_gradients
from lintf.ops.decayed.chunked import DEFAULT_CHUNK_SIZE, decayed_product_chunked
from lintf.ops.extension.environment import extension_disabled

_OP = "lintf::decayed_product"
_BACKWARD_OP = "lintf::decayed_product_backward"
_registered = False


def serves(device: torch.device) -> bool:
    """Whether the compiled op runs tensors on device: CPU tensors, the library loaded and LINTF_EXTENSION not off."""
    if device.type != "cpu" or extension_disabled():
        return False
    return _cpu_kernel_loaded()


@torch.compiler.assume_constant_result
def _cpu_kernel_loaded() -> bool:
    """Whether the library is loaded and defines the op (an older ahead-of-time build may not)."""
    return extension.serves("cpu") and hasattr(torch.ops.lintf, "decayed_product")


def decayed_product(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Run the compiled op on validated inputs (log_decay, initial_state in the accumulation dtype): out, S_N."""
    return torch.ops.lintf.decayed_product(q, k, v, log_decay, initial_state)


def _state_like(q: Tensor, v: Tensor) -> Tensor:
    batch, heads, _, features = q.shape
    return q.new_empty(batch, heads, features, v.shape[-1], dtype=accumulation_dtype(v.dtype))  # (B, H, C, M)


def _fake_forward(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    return v.new_empty(v.shape), _state_like(q, v)


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor,
    initial_state: Tensor | None = None, grad_state: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    gradients = (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), log_decay.new_empty(log_decay.shape))
    return (*gradients, _state_like(q, v))


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:  # noqa: ANN001 (torch ctx)
    ctx.save_for_backward(*inputs)
    ctx.set_materialize_grads(False)  # an unused final state costs no zero-filled gradient


def _backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001 (torch ctx)
    q, k, v, log_decay, initial_state = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _recorded_backward(ctx, grad_out, grad_state)
    if grad_out is None:
        grad_out = torch.zeros_like(v)
    dq, dk, dv, d_log_decay, d_state = torch.ops.lintf.decayed_product_backward(
        grad_out, q, k, v, log_decay, initial_state, grad_state
    )
    return dq, dk, dv, d_log_decay, None if initial_state is None else d_state


def _recorded_backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001
    """Gradients as a differentiable function of the inputs and of the incoming gradients."""
    inputs = ctx.saved_tensors
    q, k, v, log_decay, initial_state = inputs
    acc = log_decay.dtype
    chunk = max(1, min(DEFAULT_CHUNK_SIZE, q.shape[2]))
    outputs = decayed_product_chunked(q.to(acc), k.to(acc), v.to(acc), log_decay, chunk, initial_state)
    incoming = [None if g is None else g.to(o.dtype) for o, g in zip(outputs, (grad_out, grad_state))]
    return recorded_gradients(outputs, incoming, inputs, ctx.needs_input_grad)


def register_python_parts() -> None:
    """Register the fake and autograd rules of the loaded op, if the library defines it (idempotent)."""
    global _registered
    if _registered or not hasattr(torch.ops.lintf, "decayed_product"):
        return
    torch.library.register_fake(_OP, _fake_forward)
    torch.library.register_fake(_BACKWARD_OP, _fake_backward)
    torch.library.register_autograd(_OP, _backward, setup_context=_setup_context)
    torch.library.register_autograd(_BACKWARD_OP, not_differentiable(_BACKWARD_OP, _OP))
    _registered = True


extension.on_load(register_python_parts)
