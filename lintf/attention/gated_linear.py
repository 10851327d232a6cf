"""Gated linear attention: linear attention with a data-dependent forget gate per step and head.

    a_i = sigmoid(w . k_i + b)^(1/temperature),  S_i = a_i S_{i-1} + phi(k_i) v_i^T,  z_i = a_i z_{i-1} + phi(k_i)
    out_i = phi(q_i) S_i / (phi(q_i) z_i + eps)

As in GLA (Yang et al. 2024) the log-gate is logsigmoid(.) / temperature (16 there), which keeps
decays close to 1 at initialisation. The attention sees only q, k, v, so the gate is a small
learned projection (w, b) of the key, shared by the heads. With a non-negative phi the
normaliser is the one of ``linear`` attention, decayed like the state. Padded keys are absent:
they add nothing and do not decay the state. Non-causal: key j reaches query i through the gates
between them in either direction (queries and keys share positions). The state is the op's
``LinearAttentionState(kv=S (B, H, C, M), normaliser=z (B, H, C))``, validated by the op. Packed
documents (``cu_seqlens``) go to the op causally; non-causal, one document at a time.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.arguments import non_negative
from lintf.attention.base import Attention, State
from lintf.attention.linear import empty_linear_state
from lintf.ops import LinearAttentionState, accumulation_dtype, decayed_linear_attention
from lintf.registry import build_feature_map, register_attention


@register_attention("gated_linear")
class GatedLinearAttention(Attention):
    """Normalised linear attention whose state forgets at a rate computed from each key.

    Args:
        head_dim: D.
        feature_map: registry name of phi (non-negative; see ``lintf.list_feature_maps()``).
        feature_map_kwargs: extra arguments of that feature map.
        temperature: divides the log-gate; larger keeps decays closer to 1.
        eps: added to the denominator phi(q).z; >= 0.
    """

    self_attention_only = True
    supports_packed = True

    def __init__(
        self,
        head_dim: int,
        feature_map: str = "elu",
        feature_map_kwargs: dict[str, Any] | None = None,
        temperature: float = 16.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(head_dim)
        if not temperature > 0:
            raise ValueError(f"gated_linear: temperature must be > 0, got {temperature!r}")
        self.feature_map = build_feature_map(feature_map, head_dim, **(feature_map_kwargs or {}))
        self.gate = nn.Linear(head_dim, 1)
        self.temperature = float(temperature)
        self.eps = non_negative(self.display_name(), "eps", eps)

    def log_decay(self, k: Tensor) -> Tensor:
        """log a: k (..., D) -> (...), <= 0."""
        logits = F.linear(k, self.gate.weight.to(k.dtype), self.gate.bias.to(k.dtype)).squeeze(-1)
        return F.logsigmoid(logits) / self.temperature

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and not causal:  # the gates between two documents would join them
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        acc = accumulation_dtype(v.dtype)
        if state is None:
            self.feature_map.maybe_redraw()  # random features change only where a sequence starts
        with torch.autocast(q.device.type, enabled=False):
            phi_q = self.feature_map.forward_queries(q.to(acc)).to(acc)  # (B, H, N, C)
            phi_k = self.feature_map.forward_keys(k.to(acc)).to(acc)  # (B, H, N, C)
            log_decay = self.log_decay(k.to(acc))  # (B, H, N)
            if key_padding_mask is not None:
                phi_k = phi_k.masked_fill(key_padding_mask[:, None, :, None], 0.0)
                log_decay = log_decay.masked_fill(key_padding_mask[:, None, :], 0.0)
            if not causal:
                out = decayed_linear_attention(phi_q, phi_k, v.to(acc), log_decay, causal=False, eps=self.eps,
                                               check_ranges=False)  # log-sigmoids: <= 0
                return out.to(v.dtype), None
            out, final = decayed_linear_attention(
                phi_q, phi_k, v.to(acc), log_decay, eps=self.eps, initial_state=state, return_state=True,
                cu_seqlens=cu_seqlens, check_ranges=False,
            )  # (B, H, N, M), LinearAttentionState((B, H, C, M), (B, H, C))
        return out.to(v.dtype), final if return_state else None

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        return empty_linear_state(batch_size, n_heads, self.feature_map.out_dim, value_dim, device, dtype)

    def attend_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: LinearAttentionState
    ) -> tuple[Tensor, LinearAttentionState]:
        acc = state.kv.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            phi_q = self.feature_map.forward_queries(q_t.to(acc)).to(acc)  # (B, H, C)
            phi_k = self.feature_map.forward_keys(k_t.to(acc)).to(acc)  # (B, H, C)
            decay = self.log_decay(k_t.to(acc)).exp().unsqueeze(-1)  # (B, H, 1)
            kv = decay.unsqueeze(-1) * state.kv + phi_k.unsqueeze(-1) * v_t.to(acc).unsqueeze(-2)  # (B, H, C, M)
            normaliser = decay * state.normaliser + phi_k  # (B, H, C)
            numerator = (phi_q.unsqueeze(-1) * kv).sum(-2)  # (B, H, M)
            denominator = (phi_q * normaliser).sum(-1, keepdim=True)  # (B, H, 1)
        return (numerator / (denominator + self.eps)).to(v_t.dtype), LinearAttentionState(kv, normaliser)
