"""The causal product's entry point: every causal linear attention goes through these two functions.

``causal_linear_attention`` and ``causal_dot_product`` validate their inputs, accumulate in fp32
(fp64 for fp64 inputs) and return the input dtype (under autocast: the autocast dtype). Both
continue from an optional ``initial_state`` and can return the final state (``LinearAttentionState``,
``state.py``), so a sequence processed in pieces gives exactly the output and gradients of the whole.

Where the product is computed: where the compiled op serves the inputs' device (``compiled.py``,
``compiled.serves``), ``torch.ops.lintf.causal_product``, whose CPU kernel is
``csrc/causal/cpu/causal_product_cpu.cpp`` (the per-chunk sweeps it schedules on torch's threads
are ``csrc/causal/cpu/sweeps.h``) and whose CUDA kernel is ``csrc/causal/cuda/causal_product_cuda.cu``;
everywhere else the pure-PyTorch chunked path (``chunked.py``). ``reference.py`` holds the naive
O(N^2) forms the tests compare both against, ``sequence_parallel.py`` the same product over a
sequence split across ranks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.causal import compiled
from lintf.ops.causal.chunked import causal_product_pytorch
from lintf.ops.causal.state import LinearAttentionState, check_state
from lintf.ops.common.arguments import check_eps
from lintf.ops.common.documents import packed_call
from lintf.ops.common.dtypes import accumulation_dtype, autocast_enabled

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _autocast_inputs(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Under autocast, run in the autocast dtype (like a matmul); fp64 inputs stay fp64."""
    device_type = q.device.type
    if not autocast_enabled(device_type):
        return q, k, v
    if torch.float64 in (q.dtype, k.dtype, v.dtype):
        return q, k, v
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in (q, k, v))


def check_causal_product_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ValueError unless q, k (B, H, N, C) and v (B, H, N, M) agree."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != 4:
            raise ValueError(
                f"causal product: {name} must be 4-D (B, H, N, features), got shape {tuple(tensor.shape)}"
            )
        if tensor.dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"causal product: {name} has dtype {tensor.dtype}; allowed: "
                + ", ".join(str(d) for d in _FLOAT_DTYPES)
            )
    if q.shape != k.shape:
        raise ValueError(
            f"causal product: q and k must have the same shape (B, H, N, C), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"causal product: v must be (B, H, N, M) with (B, H, N) = {tuple(q.shape[:3])} as in q, "
            f"got {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"causal product: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"causal product: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")


def _causal_product(
    q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool, initial_state: object, return_state: bool,
    cu_seqlens: Tensor | None = None,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Validate, then run the compiled op or the pure-PyTorch path (see the public functions)."""
    if cu_seqlens is not None:
        return _packed_causal_product(q, k, v, eps, normalize, initial_state, return_state, cu_seqlens)
    if normalize:
        check_eps("causal linear attention", eps)
    q, k, v = _autocast_inputs(q, k, v)
    check_causal_product_inputs(q, k, v)
    state = None if initial_state is None else check_state(initial_state, q, v)
    if compiled.serves(q.device.type):
        out, final = compiled.causal_product(q, k, v, float(eps), normalize, state)
    else:
        out, final = causal_product_pytorch(q, k, v, float(eps), normalize, state, final_state=return_state)
    return (out, final) if return_state else out


def _packed_causal_product(
    q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool, initial_state: object, return_state: bool,
    cu_seqlens: Tensor,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """The causal product of each document of a packed row (``lintf.ops.common.documents``)."""
    owner = "causal linear attention" if normalize else "causal product"
    if normalize:
        check_eps(owner, eps)
    q, k, v = _autocast_inputs(q, k, v)
    check_causal_product_inputs(q, k, v)

    def run(tensors: dict[str, Tensor], state: object) -> tuple[Tensor, LinearAttentionState]:
        return _causal_product(tensors["q"], tensors["k"], tensors["v"], eps, normalize, state, True)

    def zero_state(count: int) -> LinearAttentionState:
        acc = accumulation_dtype(v.dtype)
        heads, features, width = q.shape[1], q.shape[3], v.shape[3]
        return LinearAttentionState(v.new_zeros(count, heads, features, width, dtype=acc),
                                    v.new_zeros(count, heads, features, dtype=acc))

    return packed_call(owner, run, dict(q=q, k=k, v=v), cu_seqlens, initial_state, return_state, zero_state)


def causal_dot_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    initial_state: LinearAttentionState | None = None,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Numerator of causal linear attention: out_i = q_i S0 + sum_{j<=i} (q_i . k_j) v_j.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        initial_state: state (S0, z0) of earlier positions, in the accumulation dtype (fp32, fp64 for
            fp64 inputs); None means an empty prefix. z0 does not enter the numerator, but is carried on.
        return_state: also return the state after the last position.
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document, ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.

    Returns:
        (B, H, N, M) in the dtype of v (the autocast dtype under autocast); with return_state, the
        pair (out, LinearAttentionState(S0 + sum_j k_j v_j^T, z0 + sum_j k_j)).
    """
    return _causal_product(q, k, v, 0.0, False, initial_state, return_state, cu_seqlens)


def causal_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    eps: float = 1e-6,
    *,
    initial_state: LinearAttentionState | None = None,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
) -> Tensor | tuple[Tensor, LinearAttentionState]:
    """Causal linear attention with its normaliser.

    out_i = (q_i S0 + sum_{j<=i} (q_i . k_j) v_j) / (q_i . z0 + sum_{j<=i} q_i . k_j + eps)

    Args:
        q: (B, H, N, C) feature-mapped (non-negative) queries.
        k: (B, H, N, C) feature-mapped (non-negative) keys.
        v: (B, H, N, M) values.
        eps: added to the denominator; a finite number >= 0 (else a ValueError).
        initial_state: state (S0 (B, H, C, M), z0 (B, H, C)) of earlier positions, in the accumulation
            dtype (fp32, fp64 for fp64 inputs); None means an empty prefix.
        return_state: also return the state after the last position.
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document, ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.

    Returns:
        (B, H, N, M) in the dtype of v (the autocast dtype under autocast); with return_state, the
        pair (out, LinearAttentionState(S0 + sum_j k_j v_j^T, z0 + sum_j k_j)).
    """
    return _causal_product(q, k, v, eps, True, initial_state, return_state, cu_seqlens)
