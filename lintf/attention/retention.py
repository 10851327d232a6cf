"""Retention (RetNet, Sun et al. 2023): linear attention whose state decays by gamma_h per step.

    S_i = gamma_h S_{i-1} + k_i v_i^T,    out_i = q_i S_i / sqrt(r_i),    r_i = gamma_h r_{i-1} + 1

with gamma_h = 1 - 2^(-5-h) for head h by default. RetNet has no softmax-like normaliser
(q.k may be negative) and follows retention with a GroupNorm per head; an attention here returns
(B, H, N, M) to a shared output projection and has no such norm. It keeps instead the
data-independent part of RetNet's scaling: the decay mask divided by the square root of its row
sum r_i = sum_{j<=i} gamma^{i-j}, so a sum of r_i decayed terms keeps the scale of one term for
every gamma (RetNet's second, data-dependent rescaling by sum |q.k| has no recurrent form). Padded
keys are absent: they add nothing, do not decay the state and do not count in r_i. The state
is ``RetentionState(kv=S (B, H, C, M), mass=r (B, H, 1))``.

Non-causal: the decay is gamma^|i - j| in both directions (queries and keys share positions).
Packed documents (``cu_seqlens``) go to the op causally; non-causal, one document at a time.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.ops import accumulation_dtype, bidirectional_decayed_dot_product, decayed_dot_product
from lintf.registry import build_feature_map, register_attention


class RetentionState(NamedTuple):
    """Retention's state after a prefix.

    Args:
        kv: (B, H, C, M) the decayed sum S of k_j v_j^T.
        mass: (B, H, 1) the decayed count r of the positions seen.
    """

    kv: Tensor
    mass: Tensor


@register_attention("retention")
class RetentionAttention(Attention):
    """Multi-scale retention: a fixed decay gamma_h per head, scaled by sqrt of the decay mass.

    Args:
        head_dim: D.
        gammas: one decay in (0, 1) per head; None uses 1 - 2^(-5-h) for head h = 0..H-1.
        feature_map: registry name of phi applied to q and k; None uses q.k * scale as RetNet.
        feature_map_kwargs: extra arguments of that feature map.
        scale: multiplies q.k without a feature map; None uses 1/sqrt(D).
    """

    self_attention_only = True
    supports_packed = True

    def __init__(
        self,
        head_dim: int,
        gammas: list[float] | None = None,
        feature_map: str | None = None,
        feature_map_kwargs: dict[str, Any] | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__(head_dim)
        if gammas is not None and (not gammas or not all(0.0 < g < 1.0 for g in gammas)):
            raise ValueError(f"retention: gammas must be decays in (0, 1), one per head, got {gammas!r}")
        if feature_map is None and feature_map_kwargs:
            raise ValueError(f"retention: feature_map_kwargs={feature_map_kwargs!r} given without a feature_map")
        if feature_map is not None and scale is not None:
            raise ValueError(f"retention: scale={scale!r} applies only without a feature map (got {feature_map!r})")
        self.gammas = None if gammas is None else [float(g) for g in gammas]
        self.feature_map = (
            None if feature_map is None else build_feature_map(feature_map, head_dim, **(feature_map_kwargs or {}))
        )
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def log_gammas(self, n_heads: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """(H,) log gamma_h for ``n_heads`` heads."""
        if self.gammas is None:
            gammas = [1.0 - 2.0 ** (-5 - h) for h in range(n_heads)]
        elif len(self.gammas) != n_heads:
            raise ValueError(f"retention: {len(self.gammas)} gammas given for {n_heads} heads; give one per head")
        else:
            gammas = self.gammas
        return torch.tensor([math.log(g) for g in gammas], device=device, dtype=dtype)

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """phi(q), phi(k), or q * scale and k without a feature map."""
        if self.feature_map is None:
            return q * self.scale, k
        return self.feature_map.forward_queries(q), self.feature_map.forward_keys(k)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and not causal:  # the decay mask would reach across documents
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        acc = accumulation_dtype(v.dtype)
        batch, heads, length, _ = q.shape
        if state is None and self.feature_map is not None:
            self.feature_map.maybe_redraw()  # random features change only where a sequence starts
        with torch.autocast(q.device.type, enabled=False):
            phi_q, phi_k = (t.to(acc) for t in self.features(q.to(acc), k.to(acc)))  # (B, H, N, C)
            log_decay = self.log_gammas(heads, q.device, acc)[:, None].expand(batch, -1, length)  # (B, H, N)
            present = torch.ones(batch, 1, length, 1, device=q.device, dtype=acc)  # (B, 1, N, 1)
            if key_padding_mask is not None:
                present = (~key_padding_mask)[:, None, :, None].to(acc)
                log_decay = log_decay * present[..., 0]  # padded positions do not decay the state
            phi_k = phi_k * present
            ones = torch.ones_like(phi_q[..., :1])  # (B, H, N, 1)
            present = present.expand(-1, heads, -1, -1)  # (B, H, N, 1)
            if causal:
                kv, mass = (None, None) if state is None else (state.kv, state.mass.unsqueeze(-1))
                numerator, kv = decayed_dot_product(
                    phi_q, phi_k, v.to(acc), log_decay, initial_state=kv, return_state=True, cu_seqlens=cu_seqlens,
                    check_ranges=False,  # log gammas of decays checked in (0, 1) when built
                )  # (B, H, N, M), (B|D, H, C, M)
                mass, final_mass = decayed_dot_product(
                    ones, present, ones, log_decay, initial_state=mass, return_state=True, cu_seqlens=cu_seqlens,
                    check_ranges=False,
                )  # r_i: (B, H, N, 1), (B|D, H, 1, 1)
                new_state = RetentionState(kv, final_mass.squeeze(-1))  # (B|D, H, C, M), (B|D, H, 1)
            else:
                numerator = bidirectional_decayed_dot_product(phi_q, phi_k, v.to(acc), log_decay,
                                                              check_ranges=False)  # (B, H, N, M)
                mass = bidirectional_decayed_dot_product(ones, present, ones, log_decay,
                                                         check_ranges=False)  # r_i: (B, H, N, 1)
                new_state = None
            out = numerator / torch.where(mass > 0, mass, 1.0).sqrt()  # mass 0 only when nothing is visible
        return out.to(v.dtype), new_state if return_state else None

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> RetentionState:
        acc = accumulation_dtype(dtype)
        features = self.head_dim if self.feature_map is None else self.feature_map.out_dim
        return RetentionState(
            torch.zeros(batch_size, n_heads, features, value_dim, device=device, dtype=acc),  # S
            torch.zeros(batch_size, n_heads, 1, device=device, dtype=acc),  # r
        )

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: RetentionState) -> tuple[Tensor, RetentionState]:
        acc = state.kv.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            phi_q, phi_k = (t.to(acc) for t in self.features(q_t.to(acc), k_t.to(acc)))  # (B, H, C)
            gamma = self.log_gammas(q_t.shape[1], q_t.device, acc).exp()[:, None]  # (H, 1)
            kv = gamma[..., None] * state.kv + phi_k.unsqueeze(-1) * v_t.to(acc).unsqueeze(-2)  # (B, H, C, M)
            mass = gamma * state.mass + 1.0  # (B, H, 1)
            out = (phi_q.unsqueeze(-1) * kv).sum(-2) / mass.sqrt()  # (B, H, M)
        return out.to(v_t.dtype), RetentionState(kv, mass)
