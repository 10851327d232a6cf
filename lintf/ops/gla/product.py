"""Gated linear attention's entry point: linear attention whose state forgets per channel (GLA).

For each position t, with S_0 = ``initial_state`` (zeros when absent):

    S = diag(exp(log_gate_t)) S + k_t v_t^T,    o_t = scale S^T q_t

(Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient Training"). Unlike
``decayed_dot_product``, whose one decay per position scales the whole state, each of the state's C
rows (key features) forgets at its own data-dependent rate. Accumulates in fp32 (fp64 for fp64
inputs) with autocast's dtype in and out.

When the compiled op is built (``compiled.serves``, ``compiled.takes``) and ``LINTF_EXTENSION`` is not ``off``,
``lintf::gated_linear_attention`` runs it (``compiled.py``, kernels in ``csrc/gla/``): on the CPU chunks
of 32 whose in-chunk decays are running products of the gates, on CUDA (fp32, fp16, bf16, C <= 128,
compute capability 8.0+) chunks of 64 on the tensor cores with the in-chunk scores summed in log space;
the CPU backward's memory does not grow with N, the CUDA one keeps each chunk's state and its gradient. Everything else (fp64 or wide heads on CUDA, no
compiler, double backward) takes the pure-PyTorch path (``chunked.py``). ``reference.py`` holds the naive recurrence the tests compare against; the
state is the delta rule's (``lintf.ops.delta.state``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.common.arguments import check_range
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.delta.arguments import autocast_inputs, check_per_position, check_qkv, resolve_scale
from lintf.ops.delta.state import check_matrix_state
from lintf.ops.gla import compiled
from lintf.ops.gla.chunked import gla_chunked

OWNER = "gated linear attention"


def check_gla_inputs(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, initial_state: object) -> None:
    """Raise ValueError unless GLA's arguments agree (see ``gated_linear_attention``)."""
    check_qkv(OWNER, q, k, v)
    check_per_position(OWNER, "log_gate", log_gate, q, features=True)
    check_range(OWNER, "log_gate", log_gate, None, 0.0, "<= 0 (gates in (0, 1])")
    if initial_state is not None:
        check_matrix_state(initial_state, q, v, OWNER)


def gated_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_gate: Tensor,
    *,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """GLA's recurrence over a sequence; differentiable in every input.

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_gate: (B, H, N, C) log of each state row's gate at each position, <= 0.
        scale: output scale; None is C ** -0.5.
        initial_state: (B, H, C, M) state before position 0, in the accumulation dtype (fp32, fp64 for fp64
            inputs); None is zeros.
        return_state: also return the state after the last position.

    Returns:
        (B, H, N, M) in the dtype of v (under autocast: the autocast dtype); with ``return_state`` the pair
        (out, final state (B, H, C, M) in the accumulation dtype).
    """
    q, k, v = autocast_inputs(q, k, v)
    check_gla_inputs(q, k, v, log_gate, initial_state)
    factor = resolve_scale(OWNER, scale, q.shape[-1])
    acc = accumulation_dtype(v.dtype)
    with torch.autocast(q.device.type, enabled=False):
        if compiled.serves(q.device) and compiled.takes(q, v):
            out, state = compiled.gated_linear_attention(q, k, v, log_gate.to(acc), factor, initial_state)
        else:
            out, state = gla_chunked(q.to(acc), k.to(acc), v.to(acc), log_gate.to(acc), factor, initial_state)
    return (out.to(v.dtype), state) if return_state else out.to(v.dtype)
