"""The compiled op ``lintf::causal_product``: when it serves, how to call it, and its fake, autograd and autocast rules.

The schema lives in ``csrc/causal/causal_product.cpp``, the kernels beside it (CPU:
``csrc/causal/cpu/causal_product_cpu.cpp``, CUDA: ``csrc/causal/cuda/causal_product_cuda.cu``)::

    lintf::causal_product(q, k, v, eps, normalize, kv=None, normaliser=None, states_every=0)
        -> (out, denominator, final_kv, final_normaliser, kept_states)
    lintf::causal_product_backward(grad_out, q, k, v, out, denominator, normalize, kv=None,
        normaliser=None, grad_kv=None, grad_normaliser=None, kept_states=None, states_every=0)
        -> (dq, dk, dv, d_kv, d_normaliser)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M); denominator: (B, H, N) in the accumulation
dtype when normalize, else (0,); kv (B, H, C, M) and normaliser (B, H, C), the optional initial
state, and the final state and every state gradient in the accumulation dtype. kept_states
(B, H, ceil(N / states_every), C * M + C), in the accumulation dtype: the state (kv, then
normaliser) entering every span of states_every positions, which the CPU forward keeps for its
backward when ``stores_chunk_states`` says so (``lintf/ops/common/backward_mode.py``,
``LINTF_CPU_BACKWARD``); states_every=0 keeps none (B, H, 0, C * M + C). The schema names
this module (``set_python_module``), so torch imports it whenever it needs the fake kernels; the
extension runs ``register_python_parts`` once the library is loaded (``on_load``, below).

The first backward runs the compiled ``causal_product_backward``. A backward that records a graph
of its own (``create_graph=True``: double backward, gradient penalties) computes the same
gradients through the twice-differentiable pure-PyTorch path instead.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.causal.chunked import causal_product_pytorch
from lintf.ops.causal.state import LinearAttentionState
from lintf.ops.common import compiled_op
from lintf.ops.common.backward_mode import keeps_states_for_cpu_backward
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.common.recorded_gradients import recorded_gradients
from lintf.ops.common.tuning import kept_state_span

# Positions between the states a CPU forward keeps for its backward, a multiple of the sweeps' 32-position
# chunks. None: chosen by the CPU's L2 (lintf.ops.common.tuning.kept_state_span; 256 at C = M = 64, fp32, with
# 1 MiB of L2, where the states take 1/12 of q, k and v's bytes, within LINTF_CPU_BACKWARD=auto's 1/8).
STATES_EVERY: int | None = None


def span_of(q: Tensor, v: Tensor) -> int:
    """Positions between kept states for these inputs: STATES_EVERY, else the CPU's choice."""
    return STATES_EVERY or kept_state_span("causal", q.shape[-1], v.shape[-1], v.element_size())


@torch.compiler.assume_constant_result
def serves(device_type: str) -> bool:
    """Whether the compiled op runs tensors on device_type ("cpu", "cuda"); builds or loads it on first call."""
    return extension.serves(device_type)


def kept_state_bytes(q: Tensor, v: Tensor) -> int:
    """Bytes of the states a CPU forward keeps for its backward, one per ``span_of`` positions (every head)."""
    batch, heads, length, features = q.shape
    spans = -(-length // span_of(q, v))
    itemsize = torch.empty((), dtype=accumulation_dtype(v.dtype)).element_size()
    return batch * heads * spans * features * (v.shape[-1] + 1) * itemsize


def states_every(q: Tensor, k: Tensor, v: Tensor, initial_state: LinearAttentionState | None) -> int:
    """Positions between the states the forward keeps for its backward: 0 (none) unless a CPU backward may follow
    and ``keeps_states_for_cpu_backward`` (``LINTF_CPU_BACKWARD``) wants them."""
    tensors = (q, k, v) if initial_state is None else (q, k, v, *initial_state)
    input_bytes = sum(t.numel() * t.element_size() for t in (q, k, v))
    return span_of(q, v) if keeps_states_for_cpu_backward(tensors, kept_state_bytes(q, v), input_bytes) else 0


def causal_product(
    q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool, initial_state: LinearAttentionState | None
) -> tuple[Tensor, LinearAttentionState]:
    """Run the compiled op: (B, H, N, M) output in v's dtype and the final state. Inputs must be validated."""
    kv, normaliser = (None, None) if initial_state is None else initial_state
    every = states_every(q, k, v, initial_state)
    out, _, final_kv, final_normaliser, _ = torch.ops.lintf.causal_product(q, k, v, eps, normalize, kv, normaliser,
                                                                           every)
    return out, LinearAttentionState(final_kv, final_normaliser)


def _state_like(q: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    batch, heads, _, features = q.shape
    dtype = accumulation_dtype(v.dtype)
    kv = q.new_empty(batch, heads, features, v.shape[-1], dtype=dtype)  # (B, H, C, M)
    return kv, q.new_empty(batch, heads, features, dtype=dtype)  # and (B, H, C)


def _fake_forward(
    q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool,
    kv: Tensor | None = None, normaliser: Tensor | None = None, states_every: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    batch, heads, length, features = q.shape
    dtype = accumulation_dtype(v.dtype)
    denominator_shape = (batch, heads, length) if normalize else (0,)
    denominator = q.new_empty(denominator_shape, dtype=dtype)
    spans = -(-length // states_every) if states_every > 0 else 0
    kept = q.new_empty(batch, heads, spans, features * (v.shape[-1] + 1), dtype=dtype)
    return (v.new_empty(v.shape), denominator, *_state_like(q, v), kept)


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, denominator: Tensor, normalize: bool,
    kv: Tensor | None = None, normaliser: Tensor | None = None, grad_kv: Tensor | None = None,
    grad_normaliser: Tensor | None = None, kept_states: Tensor | None = None, states_every: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), *_state_like(q, v))


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, ...]) -> None:  # noqa: ANN001 (torch ctx)
    q, k, v, eps, normalize, kv, normaliser, states_every = inputs
    out, denominator, _, _, kept = output
    ctx.save_for_backward(q, k, v, out, denominator, kv, normaliser, kept)
    ctx.eps, ctx.normalize, ctx.states_every = eps, normalize, states_every
    ctx.mark_non_differentiable(denominator, kept)
    ctx.set_materialize_grads(False)  # an unused final state costs no zero-filled gradient


def _backward(  # noqa: ANN001 (torch ctx)
    ctx, grad_out: Tensor | None, _grad_denominator: None, grad_kv: Tensor | None, grad_normaliser: Tensor | None,
    _grad_kept: None,
) -> tuple:
    q, k, v, out, denominator, kv, normaliser, kept = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _recorded_backward(ctx, grad_out, grad_kv, grad_normaliser)
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv, d_kv, d_normaliser = torch.ops.lintf.causal_product_backward(
        grad_out, q, k, v, out, denominator, ctx.normalize, kv, normaliser, grad_kv, grad_normaliser, kept,
        ctx.states_every,
    )
    d_kv, d_normaliser = None if kv is None else d_kv, None if normaliser is None else d_normaliser
    return dq, dk, dv, None, None, d_kv, d_normaliser, None


def _recorded_backward(  # noqa: ANN001 (torch ctx)
    ctx, grad_out: Tensor | None, grad_kv: Tensor | None, grad_normaliser: Tensor | None
) -> tuple:
    """Gradients as a differentiable function of the inputs and of the incoming gradients."""
    q, k, v, _, _, kv, normaliser, _ = ctx.saved_tensors
    initial = None if kv is None else LinearAttentionState(kv, normaliser)
    inputs = (q, k, v, None, None, kv, normaliser, None)
    out, final = causal_product_pytorch(q, k, v, ctx.eps, ctx.normalize, initial, final_state=True)
    return recorded_gradients((out, *final), (grad_out, grad_kv, grad_normaliser), inputs, ctx.needs_input_grad)


def register_python_parts() -> None:
    """Register fake, autograd and autocast rules for the loaded library (idempotent)."""
    compiled_op.register_rules("causal_product", _fake_forward, _fake_backward, _backward, _setup_context,
                               autocast=True)


extension.on_load(register_python_parts)
