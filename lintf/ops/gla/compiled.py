"""The compiled op ``lintf::gated_linear_attention``: when it serves, how to call it, its torch.library rules.

The schema lives in ``csrc/gla/gla.cpp``, the CPU kernel beside it (``csrc/gla/cpu/gla_cpu.cpp``),
built and loaded with the rest of the library by ``lintf.ops.extension``::

    lintf::gated_linear_attention(q, k, v, log_gate, scale, initial_state=None) -> (out, final_state)
    lintf::gated_linear_attention_backward(grad_out, q, k, v, log_gate, scale, initial_state=None,
        grad_state=None) -> (dq, dk, dv, d_log_gate, d_initial_state)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M), all fp16, bf16, fp32 or fp64; log_gate
(B, H, N, C) <= 0, the states (B, H, C, M) and their gradients in the accumulation dtype (fp32,
fp64 for fp64 inputs). The first backward runs the compiled ``gated_linear_attention_backward``
(memory independent of N beyond inputs and gradients); a backward that records a graph of its own
(``create_graph=True``) differentiates the pure-PyTorch chunked path instead. Under autocast the op
runs in the autocast dtype and keeps fp32 gates and states. The extension runs
``register_python_parts`` once the library is loaded (``on_load``, below).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.common.recorded_gradients import not_differentiable, recorded_gradients
from lintf.ops.extension.environment import extension_disabled
from lintf.ops.gla.chunked import gla_chunked

_OP = "lintf::gated_linear_attention"
_BACKWARD_OP = "lintf::gated_linear_attention_backward"
_AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
_registered = False
_KEEP_ALIVE: list[torch.library.Library] = []


def serves(device: torch.device) -> bool:
    """Whether the compiled op runs tensors on device: CPU tensors, the library loaded and LINTF_EXTENSION not off."""
    if device.type != "cpu" or extension_disabled():
        return False
    return _cpu_kernel_loaded()


@torch.compiler.assume_constant_result
def _cpu_kernel_loaded() -> bool:
    """Whether the library is loaded and defines the op (an older ahead-of-time build may not)."""
    return extension.serves("cpu") and hasattr(torch.ops.lintf, "gated_linear_attention")


def gated_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Run the compiled op on validated inputs (log_gate, initial_state in the accumulation dtype): out, S_N."""
    return torch.ops.lintf.gated_linear_attention(q, k, v, log_gate, scale, initial_state)


def _state_like(q: Tensor, v: Tensor) -> Tensor:
    batch, heads, _, features = q.shape
    return q.new_empty(batch, heads, features, v.shape[-1], dtype=accumulation_dtype(v.dtype))  # (B, H, C, M)


def _fake_forward(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float, initial_state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    return v.new_empty(v.shape), _state_like(q, v)


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float,
    initial_state: Tensor | None = None, grad_state: Tensor | None = None,
) -> tuple[Tensor, ...]:
    gradients = (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), log_gate.new_empty(log_gate.shape))
    return (*gradients, _state_like(q, v))


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:  # noqa: ANN001 (torch ctx)
    q, k, v, log_gate, scale, initial_state = inputs
    ctx.save_for_backward(q, k, v, log_gate, initial_state)
    ctx.scale = scale
    ctx.set_materialize_grads(False)  # an unused final state costs no zero-filled gradient


def _backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001 (torch ctx)
    q, k, v, log_gate, initial_state = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _recorded_backward(ctx, grad_out, grad_state)
    if grad_out is None:
        grad_out = torch.zeros_like(v)
    dq, dk, dv, d_log_gate, d_state = torch.ops.lintf.gated_linear_attention_backward(
        grad_out, q, k, v, log_gate, ctx.scale, initial_state, grad_state
    )
    return dq, dk, dv, d_log_gate, None, None if initial_state is None else d_state


def _recorded_backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001
    """Gradients as a differentiable function of the inputs and of the incoming gradients."""
    q, k, v, log_gate, initial_state = ctx.saved_tensors
    acc = log_gate.dtype
    outputs = gla_chunked(q.to(acc), k.to(acc), v.to(acc), log_gate, ctx.scale, initial_state)
    incoming = [None if g is None else g.to(o.dtype) for o, g in zip(outputs, (grad_out, grad_state))]
    inputs = (q, k, v, log_gate, None, initial_state)
    return recorded_gradients(outputs, incoming, inputs, ctx.needs_input_grad)


def _autocast_kernel(device_type: str):  # noqa: ANN202 (dispatcher kernel)
    """Run in the autocast dtype (fp32 accumulation is inside the kernel); fp64, gates and states stay.

    ``torch.library.register_autocast`` would cast the fp32 state too. Autocast turned off inside the
    kernel excludes the device's autocast dispatch key, so the call below reaches the kernels.
    """

    def kernel(
        q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float, initial_state: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        dtype = torch.get_autocast_dtype(device_type)
        if torch.float64 not in (q.dtype, k.dtype, v.dtype):
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        with torch.autocast(device_type, enabled=False):
            return torch.ops.lintf.gated_linear_attention(q, k, v, log_gate, scale, initial_state)

    return kernel


def register_python_parts() -> None:
    """Register the fake, autograd and autocast rules of the loaded op, if the library defines it (idempotent)."""
    global _registered
    if _registered or not hasattr(torch.ops.lintf, "gated_linear_attention"):
        return
    torch.library.register_fake(_OP, _fake_forward)
    torch.library.register_fake(_BACKWARD_OP, _fake_backward)
    torch.library.register_autograd(_OP, _backward, setup_context=_setup_context)
    torch.library.register_autograd(_BACKWARD_OP, not_differentiable(_BACKWARD_OP, _OP))
    library = torch.library.Library("lintf", "IMPL")
    for device_type, key in _AUTOCAST_KEYS.items():
        library.impl("gated_linear_attention", _autocast_kernel(device_type), key)
    _KEEP_ALIVE.append(library)
    _registered = True


extension.on_load(register_python_parts)
