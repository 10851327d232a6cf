"""Linear attention (Katharopoulos et al. 2020): phi(Q) (phi(K)^T V), O(N) time and memory.

Causal attention is the RNN  S_i = S_{i-1} + phi(k_i) v_i^T,  z_i = z_{i-1} + phi(k_i),
out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps). ``forward`` runs it in parallel through
``lintf.ops.causal_linear_attention``, continuing from a state (S, z) and returning the next one
through the op's ``initial_state`` / ``return_state``; ``step`` advances (S, z) by one token in O(C M).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lintf.attention.arguments import non_negative
from lintf.attention.base import Attention, State
from lintf.ops import LinearAttentionState, accumulation_dtype, causal_linear_attention, check_state, incoming_state
from lintf.registry import build_feature_map, register_attention


def empty_linear_state(
    batch_size: int, n_heads: int, features: int, value_dim: int, device: torch.device | str | None, dtype: torch.dtype
) -> LinearAttentionState:
    """The state of an empty prefix: S = 0 (B, H, C, M) and z = 0 (B, H, C), in the accumulation dtype of ``dtype``."""
    acc = accumulation_dtype(dtype)
    return LinearAttentionState(
        torch.zeros(batch_size, n_heads, features, value_dim, device=device, dtype=acc),  # S
        torch.zeros(batch_size, n_heads, features, device=device, dtype=acc),  # z
    )


@register_attention("linear")
class LinearAttention(Attention):
    """Kernelised attention with a registered feature map phi.

    State and normaliser accumulate in fp32 (fp64 for fp64 inputs); outputs come back in the
    dtype of v. The state is the op's ``LinearAttentionState(kv=S (B, H, C, M), normaliser=z (B, H, C))``
    over the features C of phi, validated by the op. Packed documents (``cu_seqlens``) go to the op
causally; non-causal, one document at a time. Random features are redrawn (in training, by ``maybe_redraw``) only where a sequence
    starts, never in a continuation, which must use the features its state was built with.

    Args:
        head_dim: D.
        feature_map: registry name of phi (see ``lintf.list_feature_maps()``).
        feature_map_kwargs: extra arguments of that feature map.
        eps: added to the denominator phi(q).z; >= 0.
    """

    supports_sequence_parallel = True
    supports_packed = True

    def __init__(
        self,
        head_dim: int,
        feature_map: str = "elu",
        feature_map_kwargs: dict[str, Any] | None = None,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(head_dim)
        self.feature_map = build_feature_map(feature_map, head_dim, **(feature_map_kwargs or {}))
        self.eps = non_negative(self.display_name(), "eps", eps)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and not causal:  # each document's sums are its own
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        if state is None:
            self.feature_map.maybe_redraw()
        phi_q = self.feature_map.forward_queries(q)  # (B, H, N, C)
        phi_k = self.feature_map.forward_keys(k)  # (B, H, S, C)
        if key_padding_mask is not None:
            phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)  # padded keys add nothing
        if causal:
            return self._causal(phi_q.to(v.dtype), phi_k.to(v.dtype), v, state, return_state, cu_seqlens)
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(v.device.type, enabled=False):  # keep the sums in fp32 under autocast
            phi_q, phi_k = phi_q.to(acc), phi_k.to(acc)
            kv = phi_k.transpose(-1, -2) @ v.to(acc)  # (B, H, C, M)
            normaliser = phi_k.sum(dim=2)  # (B, H, C)
            numerator = phi_q @ kv  # (B, H, N, M)
            denominator = phi_q @ normaliser.unsqueeze(-1)  # (B, H, N, 1)
        return (numerator / (denominator + self.eps)).to(v.dtype), None

    def _causal(
        self, phi_q: Tensor, phi_k: Tensor, v: Tensor, state: LinearAttentionState | None, return_state: bool,
        cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, LinearAttentionState | None]:
        """The causal product from ``state`` (None: an empty prefix), and the state after it if asked.

        Under sequence parallelism the earlier ranks' positions join the prefix: their summed state
        (``lintf.ops.incoming_state``) is added to ``state``. Packed documents (``cu_seqlens``) restart it.
        """
        if cu_seqlens is not None:
            if self.sequence_parallel_group is not None:
                raise ValueError(f"{type(self).__name__}: packed documents (cu_seqlens) cannot be split across "
                                 "ranks; pass one or the other")
            out = causal_linear_attention(phi_q, phi_k, v, self.eps, initial_state=state, return_state=return_state,
                                          cu_seqlens=cu_seqlens)
            return out if return_state else (out, None)
        if self.sequence_parallel_group is not None:
            earlier = incoming_state(phi_k, v, self.sequence_parallel_group)
            # a given state is checked (as the op would) before the earlier ranks' is added to it
            state = earlier if state is None else LinearAttentionState(
                *(a + b for a, b in zip(check_state(state, phi_q, v), earlier)))
        if not return_state:
            return causal_linear_attention(phi_q, phi_k, v, self.eps, initial_state=state), None
        return causal_linear_attention(phi_q, phi_k, v, self.eps, initial_state=state, return_state=True)

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        return empty_linear_state(batch_size, n_heads, self.feature_map.out_dim, value_dim, device, dtype)

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        if not torch.is_autocast_enabled(v_t.device.type):  # entering the context costs as much as the update
            return self._advance(q_t, k_t, v_t, state)
        with torch.autocast(v_t.device.type, enabled=False):  # the state stays fp32 under autocast
            return self._advance(q_t, k_t, v_t, state)

    def _advance(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: LinearAttentionState
    ) -> tuple[Tensor, LinearAttentionState]:
        kv, normaliser = state
        phi_q = self.feature_map.forward_queries(q_t).to(kv.dtype)  # (B, H, C)
        phi_k = self.feature_map.forward_keys(k_t).to(kv.dtype)  # (B, H, C)
        kv = torch.addcmul(kv, phi_k.unsqueeze(-1), v_t.to(kv.dtype).unsqueeze(-2))  # (B, H, C, M), one pass
        normaliser = normaliser + phi_k
        numerator = (phi_q.unsqueeze(-2) @ kv).squeeze(-2)  # (B, H, M)
        denominator = (phi_q * normaliser).sum(-1, keepdim=True)  # (B, H, 1)
        out = numerator / (denominator + self.eps)
        return out.to(v_t.dtype), LinearAttentionState(kv, normaliser)
