"""Decayed causal product in pure PyTorch: linear attention with a per-position, per-head forget factor.

    S_i = exp(log_decay_i) S_{i-1} + k_i v_i^T,    out_i = q_i S_i

(RetNet's retention, gated linear attention); its element-wise relative
h_i = exp(log_decay_i) h_{i-1} + x_i is ``cumsum.py``. ``reference.py`` holds the naive O(N^2) and
step-by-step forms the tests compare against.

Chunked form: the sequence is cut into chunks of L positions. Inside a chunk, with
b_t = sum_{s<=t} log_decay_s (local cumulative sums, <= 0 and non-increasing), key s reaches
query t >= s with weight exp(b_t - b_s); the exponent is masked to -inf above the diagonal
*before* exp, so exp never sees a positive number. Across chunks a state carries the prefix:
chunk c adds sum_s exp(b_{L-1} - b_s) k_s v_s^T to it, and the state entering chunk c reaches
query t with exp(b_t). Cumulative sums restart at every chunk, so long sequences never subtract
two large cumulative sums (which would cost fp32 precision). Gradients come from autograd.

When the compiled op is built (``compiled.serves``; on CUDA, built with its CUDA kernels) and
``LINTF_EXTENSION`` is not ``off``, the causal passes run ``lintf::decayed_product`` instead
(``compiled.py``, kernels in ``csrc/decayed/``): the same chunked form in C++ (CPU: chunks of 32
positions; CUDA: tensor-core chunks of 64), fp32 accumulation (fp64 for fp64), and a backward giving
gradients for q, k, v, log_decay and the initial state. The CPU backward starts from the state the
forward kept every 256 positions when ``LINTF_CPU_BACKWARD`` allows it (default ``auto``: when those
states take at most 1/8 of the inputs' memory), else it recomputes them and its memory does not grow
with N. Everything else (no compiler, double backward) takes the PyTorch path here (``chunked.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.ops.causal.state import LinearAttentionState, check_state
from lintf.ops.common.arguments import check_eps, check_range
from lintf.ops.common.documents import packed_call
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.decayed import compiled
from lintf.ops.decayed.chunked import DEFAULT_CHUNK_SIZE, decayed_product_chunked

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_decayed_inputs(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None, check_ranges: bool = True
) -> None:
    """Raise ValueError unless q, k (B, H, N, C), v (B, H, N, M), log_decay (B, H, N) <= 0 agree."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != 4 or tensor.dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"decayed product: {name} must be a 4-D float tensor (B, H, N, features), got shape "
                f"{tuple(tensor.shape)}, dtype {tensor.dtype}"
            )
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"decayed product: expected q, k (B, H, N, C) and v (B, H, N, M) with the same B, H, N; got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device == log_decay.device):
        raise ValueError(
            f"decayed product: q, k, v must share a dtype and, with log_decay, a device; got "
            f"{q.dtype}/{q.device}, {k.dtype}/{k.device}, {v.dtype}/{v.device}, log_decay on {log_decay.device}"
        )
    if tuple(log_decay.shape) != tuple(q.shape[:3]) or log_decay.dtype not in _FLOAT_DTYPES:
        raise ValueError(
            f"decayed product: log_decay must be a float tensor (B, H, N) = {tuple(q.shape[:3])}, got shape "
            f"{tuple(log_decay.shape)}, dtype {log_decay.dtype}"
        )
    if check_ranges:
        check_range("decayed product", "log_decay", log_decay, None, 0.0, "<= 0 (decays in (0, 1])")
    expected_state = (*q.shape[:2], q.shape[3], v.shape[3])
    if initial_state is not None and tuple(initial_state.shape) != expected_state:
        raise ValueError(
            f"decayed product: initial_state must be (B, H, C, M) = {expected_state}, got "
            f"{tuple(initial_state.shape)}"
        )


def _chunk_length(chunk_size: int | None, length: int) -> int:
    if chunk_size is None:
        chunk_size = DEFAULT_CHUNK_SIZE
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"decayed product: chunk_size must be a positive int or None, got {chunk_size!r}")
    return max(1, min(chunk_size, length))


def _causal_pass(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The causal recurrence on validated inputs: the compiled op where it serves, else the chunked PyTorch one.

    Returns out (B, H, N, M) (v's dtype from the op, the accumulation dtype from PyTorch) and S_N (B, H, C, M).
    """
    acc = accumulation_dtype(v.dtype)
    start = None if initial_state is None else initial_state.to(acc)
    if compiled.serves(q.device):
        return compiled.decayed_product(q, k, v, log_decay.to(acc), start)
    return decayed_product_chunked(q.to(acc), k.to(acc), v.to(acc), log_decay.to(acc), chunk, start)


def decayed_dot_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    chunk_size: int | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
    check_ranges: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal decayed product out_i = sum_{j<=i} exp(sum_{j<s<=i} log_decay_s) (q_i . k_j) v_j.

    Accumulates in fp32 (fp64 for fp64 inputs) with autocast off; differentiable by autograd.

    Args:
        q: (B, H, N, C) queries (feature-mapped or not).
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_decay: (B, H, N) log of the forget factor applied to the state at each position, <= 0.
        chunk_size: positions per chunk of the PyTorch path; None uses 64 (the compiled op uses 32).
        initial_state: (B, H, C, M) state before position 0 (decayed by log_decay_0); None is zeros.
        return_state: also return the state S_{N-1} after the last position.
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document, ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.
        check_ranges: check that log_decay <= 0 (a ValueError on the CPU, a device-side assertion on a GPU: one
            pass over it and a few kernel launches); False where the caller builds it in range (minus a softplus).

    Returns:
        (B, H, N, M) in the dtype of v, and with ``return_state`` the final (B, H, C, M) state in
        the accumulation dtype.
    """
    if cu_seqlens is not None:
        return _packed_decayed_dot_product(q, k, v, log_decay, chunk_size, initial_state, return_state, cu_seqlens,
                                           check_ranges)
    check_decayed_inputs(q, k, v, log_decay, initial_state, check_ranges)
    chunk = _chunk_length(chunk_size, q.shape[2])
    with torch.autocast(q.device.type, enabled=False):
        out, state = _causal_pass(q, k, v, log_decay, chunk, initial_state)
    return (out.to(v.dtype), state) if return_state else out.to(v.dtype)


def _packed_decayed_dot_product(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk_size: int | None, initial_state: Tensor | None,
    return_state: bool, cu_seqlens: Tensor, check_ranges: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """``decayed_dot_product`` of each document of a packed row (``lintf.ops.common.documents``)."""
    check_decayed_inputs(q, k, v, log_decay, None, check_ranges)

    def run(tensors: dict[str, Tensor], state: Tensor | None) -> tuple[Tensor, Tensor]:
        return decayed_dot_product(tensors["q"], tensors["k"], tensors["v"], tensors["log_decay"],
                                   chunk_size=chunk_size, initial_state=state, return_state=True,
                                   check_ranges=False)

    def zero_state(count: int) -> Tensor:
        return v.new_zeros(count, q.shape[1], q.shape[3], v.shape[3], dtype=accumulation_dtype(v.dtype))

    per_position = dict(q=q, k=k, v=v, log_decay=log_decay)
    return packed_call("decayed product", run, per_position, cu_seqlens, initial_state, return_state, zero_state)


def bidirectional_decayed_dot_product(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, *, chunk_size: int | None = None, check_ranges: bool = True
) -> Tensor:
    """Non-causal decayed product out_i = sum_j exp(-|cum_i - cum_j|) (q_i . k_j) v_j, cum = cumsum(log_decay).

    Key j reaches query i through the decays of the positions after the earlier of the two up to
    the later one (gamma^|i - j| for a constant decay). Computed as a causal pass, a causal pass
    over the reversed sequence and minus the diagonal counted twice; queries and keys share
    positions, so N == S.

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_decay: (B, H, N) log-decays, <= 0.
        chunk_size: positions per chunk; None uses 64.
        check_ranges: check that log_decay <= 0 (a ValueError on the CPU, a device-side assertion on a GPU: one
            pass over it and a few kernel launches); False where the caller builds it in range (minus a softplus).

    Returns:
        (B, H, N, M) in the dtype of v.
    """
    check_decayed_inputs(q, k, v, log_decay, None, check_ranges)
    acc = accumulation_dtype(v.dtype)
    chunk = _chunk_length(chunk_size, q.shape[2])
    if q.shape[2] == 0:
        return v.new_zeros(v.shape)
    with torch.autocast(q.device.type, enabled=False):
        q, k, values, log_decay = q.to(acc), k.to(acc), v.to(acc), log_decay.to(acc)
        forward, _ = _causal_pass(q, k, values, log_decay, chunk, None)
        # reversed, the decay between reversed positions t-1 and t is the original one at N - t
        reversed_decay = F.pad(log_decay.flip(-1)[..., :-1], (1, 0))  # (B, H, N)
        backward, _ = _causal_pass(q.flip(2), k.flip(2), values.flip(2), reversed_decay, chunk, None)
        diagonal = (q * k).sum(-1, keepdim=True) * values  # (B, H, N, M): counted by both passes
        out = forward + backward.flip(2) - diagonal
    return out.to(v.dtype)


def decayed_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    *,
    causal: bool = True,
    eps: float = 1e-6,
    chunk_size: int | None = None,
    initial_state: LinearAttentionState | None = None,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
    check_ranges: bool = True,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Normalised decayed linear attention: the decayed product over the same product of ones.

    out_i = sum_j w_ij (q_i . k_j) v_j / (sum_j w_ij (q_i . k_j) + eps), with w_ij the causal decay
    (j <= i) or the bidirectional one (all j). Causal, it is the recurrence S_i = a_i S_{i-1} + k_i v_i^T,
    z_i = a_i z_{i-1} + k_i, out_i = q_i S_i / (q_i . z_i + eps) with a_i = exp(log_decay_i).
    Both come from one numerator pass (the compiled op where it serves) over v with a column of ones
    appended, whose last output column is the denominator and whose state's last column is z.

    Args:
        q: (B, H, N, C) feature-mapped (non-negative) queries.
        k: (B, H, N, C) feature-mapped (non-negative) keys.
        v: (B, H, N, M) values.
        log_decay: (B, H, N) log-decays, <= 0.
        causal: causal (j <= i) or bidirectional decays.
        eps: added to the denominator; a finite number >= 0 (else a ValueError).
        chunk_size: positions per chunk; None uses 64.
        initial_state: (S, z) before position 0 (causal only), decayed by log_decay_0; None: zeros.
        return_state: also return (S, z) after the last position (causal only), in the accumulation dtype.
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document (causal only), ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.
        check_ranges: check that log_decay <= 0 (a ValueError on the CPU, a device-side assertion on a GPU: one
            pass over it and a few kernel launches); False where the caller builds it in range (minus a softplus).

    Returns:
        (B, H, N, M) in the dtype of v; with ``return_state`` the pair (out, LinearAttentionState).
    """
    check_eps("decayed linear attention", eps)
    if not causal and (initial_state is not None or return_state):
        raise ValueError("decayed linear attention: initial_state and return_state need causal=True, got causal=False")
    if not causal and cu_seqlens is not None:
        raise ValueError("decayed linear attention: cu_seqlens needs causal=True, got causal=False")
    if cu_seqlens is not None:
        return _packed_decayed_linear_attention(q, k, v, log_decay, eps, chunk_size, initial_state, return_state,
                                                cu_seqlens, check_ranges)
    acc = accumulation_dtype(v.dtype)
    values = v.to(acc)
    # the normaliser rides along as a column of ones: one pass gives numerator and denominator
    values_and_ones = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # (B, H, N, M+1)
    q, k = q.to(acc), k.to(acc)
    if not causal:
        product = bidirectional_decayed_dot_product(q, k, values_and_ones, log_decay, chunk_size=chunk_size,
                                                    check_ranges=check_ranges)
        return (product[..., :-1] / (product[..., -1:] + eps)).to(v.dtype)
    start = None
    if initial_state is not None:
        kv, normaliser = check_state(initial_state, q, v, "decayed linear attention")
        start = torch.cat([kv, normaliser.unsqueeze(-1)], dim=-1)  # (B, H, C, M+1)
    product, final = decayed_dot_product(
        q, k, values_and_ones, log_decay, chunk_size=chunk_size, initial_state=start, return_state=True,
        check_ranges=check_ranges,
    )
    out = (product[..., :-1] / (product[..., -1:] + eps)).to(v.dtype)
    return (out, LinearAttentionState(final[..., :-1], final[..., -1])) if return_state else out


def _packed_decayed_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, eps: float, chunk_size: int | None,
    initial_state: LinearAttentionState | None, return_state: bool, cu_seqlens: Tensor, check_ranges: bool,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Causal ``decayed_linear_attention`` of each document of a packed row (``lintf.ops.common.documents``)."""
    check_decayed_inputs(q, k, v, log_decay, None, check_ranges)

    def run(tensors: dict[str, Tensor], state: LinearAttentionState | None) -> tuple[Tensor, LinearAttentionState]:
        return decayed_linear_attention(tensors["q"], tensors["k"], tensors["v"], tensors["log_decay"], eps=eps,
                                        chunk_size=chunk_size, initial_state=state, return_state=True,
                                        check_ranges=False)

    def zero_state(count: int) -> LinearAttentionState:
        acc = accumulation_dtype(v.dtype)
        return LinearAttentionState(v.new_zeros(count, q.shape[1], q.shape[3], v.shape[3], dtype=acc),
                                    v.new_zeros(count, q.shape[1], q.shape[3], dtype=acc))

    per_position = dict(q=q, k=k, v=v, log_decay=log_decay)
    return packed_call("decayed linear attention", run, per_position, cu_seqlens, initial_state, return_state,
                       zero_state)
