"""The compiled op ``lintf::decayed_product``: when it serves, how to call it, and its fake and autograd rules.

The schema lives in ``csrc/decayed/decayed_product.cpp``, the kernels beside it (CPU:
``csrc/decayed/cpu/decayed_product_cpu.cpp``, CUDA: ``csrc/decayed/cuda/decayed_product_cuda.cu``), built
and loaded with the rest of the library by ``lintf.ops.extension``::

    lintf::decayed_product(q, k, v, log_decay, initial_state=None, state_spacing=0)
        -> (out, final_state, chunk_states)
    lintf::decayed_product_backward(grad_out, q, k, v, log_decay, initial_state=None, grad_state=None,
        chunk_states=None, state_spacing=0) -> (dq, dk, dv, d_log_decay, d_initial_state)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M), all fp16, bf16, fp32 or fp64; log_decay
(B, H, N) <= 0, the states (B, H, C, M) and their gradients in the accumulation dtype (fp32, fp64
for fp64 inputs). The first backward runs the compiled ``decayed_product_backward``; a backward
that records a graph of its own (``create_graph=True``) differentiates the pure-PyTorch chunked
path instead. When a CPU backward will follow and ``LINTF_CPU_BACKWARD`` is ``stored``
(``lintf.ops.common.backward_mode``; ``auto`` keeps none, see AUTO_STATE_SHARE), the forward keeps
the state entering every span of ``spacing_of`` positions (by the CPU's L2), (B, H, ceil(N / spacing), C, M), and the
backward starts each span from its state; otherwise (and always on CUDA, whose backward recomputes its chunk states
itself) state_spacing is 0 and the backward's memory does not grow with N. The extension runs
``register_python_parts`` once the library is loaded (``on_load``, below).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.common.backward_mode import keeps_states_for_cpu_backward
from lintf.ops.common import compiled_op
from lintf.ops.common.compiled_op import fake_state
from lintf.ops.common.recorded_gradients import recorded_gradients
from lintf.ops.common.tuning import kept_state_span
from lintf.ops.decayed.chunked import DEFAULT_CHUNK_SIZE, decayed_product_chunked

# Positions between kept states; None: chosen by the CPU's L2 (lintf.ops.common.tuning.kept_state_span; 256 at
# C = M = 64, fp32, with 1 MiB of L2). Per position they take C M / spacing elements against the 2C + M + 1 of
# q, k, v and log_decay: 1/12 at C = M = 64 in fp32 with 256.
STATE_SPACING: int | None = None


def spacing_of(q: Tensor, v: Tensor) -> int:
    """Positions between kept states for these inputs: STATE_SPACING, else the CPU's choice."""
    return STATE_SPACING or kept_state_span("decayed", q.shape[-1], v.shape[-1], v.element_size())
# The share of the inputs' bytes up to which LINTF_CPU_BACKWARD=auto keeps chunk states: none. The dq sweep
# rebuilds S position by position whatever state it starts from, so kept states only spare the backward a
# second read of the inputs, which its prefetch hides; keeping and loading them made forward+backward 4-6%
# slower on every vector path at N = 1k to 16k (benchmarks/results/decayed_product.md, `stored` rows).
AUTO_STATE_SHARE = 0.0


def serves(device: torch.device) -> bool:
    """Whether the compiled op runs tensors on device: CPU tensors, or CUDA ones when the library was built with its
    CUDA kernels; the library loaded and LINTF_EXTENSION not off."""
    return compiled_op.serves("decayed_product", device, ("cpu", "cuda"))


def decayed_product(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Run the compiled op on validated inputs (log_decay, initial_state in the accumulation dtype): out, S_N."""
    spacing = spacing_of(q, v) if keeps_chunk_states(q, k, v, log_decay, initial_state) else 0
    out, final_state, _ = torch.ops.lintf.decayed_product(q, k, v, log_decay, initial_state, spacing)
    return out, final_state


def keeps_chunk_states(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None) -> bool:
    """Whether the forward keeps its chunk states: a CPU backward will follow and LINTF_CPU_BACKWARD is ``stored``
    (``auto`` keeps none here: AUTO_STATE_SHARE)."""
    batch, heads, length, features = q.shape
    spans = -(-length // spacing_of(q, v))
    state_bytes = batch * heads * spans * features * v.shape[-1] * log_decay.element_size()
    input_bytes = sum(t.numel() * t.element_size() for t in (q, k, v, log_decay))
    return keeps_states_for_cpu_backward((q, k, v, log_decay, initial_state), state_bytes, input_bytes,
                                         auto_share=AUTO_STATE_SHARE)


def _fake_forward(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None = None, state_spacing: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    batch, heads, length, features = q.shape
    spans = -(-length // state_spacing) if state_spacing else 0
    chunk_states = log_decay.new_empty(batch, heads, spans, features, v.shape[-1])  # (B, H, spans, C, M)
    return v.new_empty(v.shape), fake_state(q, v), chunk_states


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor,
    initial_state: Tensor | None = None, grad_state: Tensor | None = None, chunk_states: Tensor | None = None,
    state_spacing: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    gradients = (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), log_decay.new_empty(log_decay.shape))
    return (*gradients, fake_state(q, v))


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor, Tensor]) -> None:  # noqa: ANN001 (torch ctx)
    *tensors, ctx.state_spacing = inputs
    chunk_states = output[2] if ctx.state_spacing else None
    ctx.save_for_backward(*tensors, chunk_states)
    ctx.mark_non_differentiable(output[2])
    ctx.set_materialize_grads(False)  # an unused final state costs no zero-filled gradient


def _backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None, _: Tensor | None) -> tuple:  # noqa: ANN001
    q, k, v, log_decay, initial_state, chunk_states = ctx.saved_tensors
    if torch.is_grad_enabled():
        return (*_recorded_backward(ctx, grad_out, grad_state), None)
    if grad_out is None:
        grad_out = torch.zeros_like(v)
    dq, dk, dv, d_log_decay, d_state = torch.ops.lintf.decayed_product_backward(
        grad_out, q, k, v, log_decay, initial_state, grad_state, chunk_states, ctx.state_spacing
    )
    return dq, dk, dv, d_log_decay, None if initial_state is None else d_state, None


def _recorded_backward(ctx, grad_out: Tensor | None, grad_state: Tensor | None) -> tuple:  # noqa: ANN001
    """Gradients as a differentiable function of the inputs and of the incoming gradients."""
    inputs = ctx.saved_tensors[:5]
    q, k, v, log_decay, initial_state = inputs
    acc = log_decay.dtype
    chunk = max(1, min(DEFAULT_CHUNK_SIZE, q.shape[2]))
    outputs = decayed_product_chunked(q.to(acc), k.to(acc), v.to(acc), log_decay, chunk, initial_state)
    incoming = [None if g is None else g.to(o.dtype) for o, g in zip(outputs, (grad_out, grad_state))]
    return recorded_gradients(outputs, incoming, inputs, ctx.needs_input_grad)


def register_python_parts() -> None:
    """Register the fake and autograd rules of the loaded op, if the library defines it (idempotent)."""
    compiled_op.register_rules("decayed_product", _fake_forward, _fake_backward, _backward, _setup_context,
                               autocast=False)


extension.on_load(register_python_parts)
