"""Pure-PyTorch causal products: the always-available path behind ``lintf.ops``.

Runs wherever torch runs (no compiler, unusual devices), is the baseline the compiled op is
benchmarked against and computes the compiled op's double backward. Inputs are assumed
validated; they are cast to the accumulation dtype (fp32, or fp64 for fp64), the chunked
product runs there, and outputs return in v's dtype (states stay in the accumulation dtype).
Every operation is differentiable, twice.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.chunked import chunked_causal_product
from lintf.ops.dtypes import accumulation_dtype, autocast_enabled
from lintf.ops.state import LinearAttentionState


def causal_product_pytorch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    eps: float,
    normalize: bool,
    initial_state: LinearAttentionState | None = None,
    final_state: bool = False,
) -> tuple[Tensor, LinearAttentionState | None]:
    """Causal linear attention (normalize) or its numerator, continuing from initial_state.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        eps: added to the denominator (normalize only).
        normalize: divide by q_i.z0 + sum_{j<=i} q_i.k_j + eps.
        initial_state: state of the preceding positions (accumulation dtype); None means zeros.
        final_state: also return the state after the last position (else None, at no cost).

    Returns:
        (B, H, N, M) output in v's dtype, and the final state or None.
    """
    device_type = q.device.type
    if autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):  # autocast would round the fp32 sums to its dtype
            return causal_product_pytorch(q, k, v, eps, normalize, initial_state, final_state)
    acc = accumulation_dtype(v.dtype)
    q, k, values = q.to(acc), k.to(acc), v.to(acc)
    value_dim = values.shape[-1]
    start = None if initial_state is None else initial_state.kv  # (B, H, C, M)
    if normalize:
        # the normaliser rides along as a column of ones: one pass gives numerator and denominator
        values = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # (B, H, N, M+1)
        if start is not None:
            start = torch.cat([start, initial_state.normaliser.unsqueeze(-1)], dim=-1)  # (B, H, C, M+1)
    product = chunked_causal_product(q, k, values)  # (B, H, N, M[+1])
    if start is not None:
        product = product + q @ start
    out = product[..., :value_dim] / (product[..., value_dim:] + eps) if normalize else product
    state = None
    if final_state:
        kv, normaliser = k.transpose(-1, -2) @ values[..., :value_dim], k.sum(dim=2)  # (B, H, C, M), (B, H, C)
        if initial_state is not None:
            kv, normaliser = kv + initial_state.kv, normaliser + initial_state.normaliser
        state = LinearAttentionState(kv, normaliser)
    return out.to(v.dtype), state


def causal_linear_attention_pytorch(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Normalised causal linear attention with q, k (B, H, N, C), v (B, H, N, M) -> (B, H, N, M)."""
    return causal_product_pytorch(q, k, v, eps, normalize=True)[0]
