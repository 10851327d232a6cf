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
from lintf.ops.common.documents import packed_call
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.delta.arguments import autocast_inputs, check_per_position, check_qkv, resolve_scale
from lintf.ops.delta.state import check_matrix_state
from lintf.ops.gla import compiled
from lintf.ops.gla.chunked import gla_chunked

OWNER = "gated linear attention"


def check_gla_inputs(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, initial_state: object, check_ranges: bool = True
) -> None:
    """Raise ValueError unless GLA's arguments agree (see ``gated_linear_attention``)."""
    check_qkv(OWNER, q, k, v)
    check_per_position(OWNER, "log_gate", log_gate, q, features=True)
    if check_ranges:
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
    cu_seqlens: Tensor | None = None,
    check_ranges: bool = True,
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
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document, ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.
        check_ranges: check that log_gate <= 0 (a ValueError on the CPU, a device-side assertion on a GPU: one pass
            over them and a few kernel launches); False where the caller builds them in range (a log-sigmoid).

    Returns:
        (B, H, N, M) in the dtype of v (under autocast: the autocast dtype); with ``return_state`` the pair
        (out, final state (B, H, C, M) in the accumulation dtype).
    """
    if cu_seqlens is not None:
        return _packed_gla(q, k, v, log_gate, scale, initial_state, return_state, cu_seqlens, check_ranges)
    q, k, v = autocast_inputs(q, k, v)
    check_gla_inputs(q, k, v, log_gate, initial_state, check_ranges)
    factor = resolve_scale(OWNER, scale, q.shape[-1])
    acc = accumulation_dtype(v.dtype)
    with torch.autocast(q.device.type, enabled=False):
        if compiled.serves(q.device) and compiled.takes(q, v):
            out, state = compiled.gated_linear_attention(q, k, v, log_gate.to(acc), factor, initial_state)
        else:
            out, state = gla_chunked(q.to(acc), k.to(acc), v.to(acc), log_gate.to(acc), factor, initial_state)
    return (out.to(v.dtype), state) if return_state else out.to(v.dtype)


def _packed_gla(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float | None, initial_state: Tensor | None,
    return_state: bool, cu_seqlens: Tensor, check_ranges: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """``gated_linear_attention`` of each document of a packed row (``lintf.ops.common.documents``)."""
    q, k, v = autocast_inputs(q, k, v)
    check_gla_inputs(q, k, v, log_gate, None, check_ranges)
    factor = resolve_scale(OWNER, scale, q.shape[-1])

    def run(tensors: dict[str, Tensor], state: Tensor | None) -> tuple[Tensor, Tensor]:
        return gated_linear_attention(tensors["q"], tensors["k"], tensors["v"], tensors["log_gate"], scale=factor,
                                      initial_state=state, return_state=True, check_ranges=False)

    def zero_state(count: int) -> Tensor:
        return v.new_zeros(count, q.shape[1], q.shape[3], v.shape[3], dtype=accumulation_dtype(v.dtype))

    per_position = dict(q=q, k=k, v=v, log_gate=log_gate)
    return packed_call(OWNER, run, per_position, cu_seqlens, initial_state, return_state, zero_state)
