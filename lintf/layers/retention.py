"""The retention layer recipe (``encoder.layer: recipe`` with ``retention``), FLA's ``MultiScaleRetention`` defaults.

    gamma_h = 1 - 2^(-5 - h)                     (fixed, one per head h = 0..H-1)
    S_t = gamma_h S_{t-1} + R_t k_t v_t^T,    o_t = Dk^-1/2 S_t^T R_t q_t

inside the frame of ``lintf.layers.recipe`` (short convolutions off by default, output gate on: a
gated RMSNorm, as FLA's fused norm and swish gate), where R_t rotates q and k by their position t
(rotary codes, RoFormer's halves, base 10000, as FLA's ``RotaryEmbedding``). Unlike the bare
``retention`` attention there is no sqrt-of-mass scaling: the RMSNorm sets the output's scale.

The product R_t q_t . R_j k_j depends only on t - j, so the state is kept in the frame of the next
position: after a call of n positions the memory is rotated by R_{-n}, and a continued sequence
starts again at position 0. The state is therefore the recipe's (convolutions, memory) with no
position counter, and a sequence split anywhere gives the outputs of the whole. The recurrence is
``lintf.ops.decayed_dot_product``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from lintf.layers.recipe import FEATURE_MAPS, RecipeLayer, check_feature_map, head_widths
from lintf.ops import decayed_dot_product
from lintf.registry import register_layer

ROTARY_BASE = 10000.0


def rotate(x: Tensor, positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotary codes on the last dimension (its two halves paired): x (..., N, D), positions (..., N) -> (..., N, D)."""
    angles = positions.to(x.dtype)[..., None] * inv_freq.to(x.dtype)  # (..., N, D/2)
    cos, sin = angles.cos().repeat(*(1,) * (angles.dim() - 1), 2), angles.sin().repeat(*(1,) * (angles.dim() - 1), 2)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def retention_log_decays(heads: int) -> Tensor:
    """(H,) log gamma_h = log(1 - 2^(-5 - h)), RetNet's fixed per-head decays."""
    return torch.tensor([math.log(1.0 - 2.0 ** (-5 - h)) for h in range(heads)], dtype=torch.float64)


@register_layer("retention")
class RetentionLayer(RecipeLayer):
    """Multi-scale retention (RetNet, Sun et al. 2023) as a layer: fixed per-head decays and rotary q, k.

    Args:
        d_model: model width.
        n_heads: query heads H (head h decays by 1 - 2^(-5 - h)).
        expand_k: query/key width H * Dk = expand_k * d_model; Dk even (the rotary codes pair its halves).
        expand_v: value width H * Dv = expand_v * d_model.
        n_kv_heads: key/value heads, dividing n_heads (grouped heads); None: n_heads.
        feature_map: applied to q and k before the rotary codes ("relu", "silu"), or None.
        short_conv: kernel size of the causal depthwise convolution (with SiLU) on q, k, v; None: none.
        conv_bias: a bias in the short convolutions.
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        norm_eps: the output RMSNorm's epsilon.
    """

    def __init__(
        self, d_model: int, n_heads: int, expand_k: float = 1.0, expand_v: float = 2.0, n_kv_heads: int | None = None,
        feature_map: Literal["relu", "silu"] | None = None, short_conv: int | None = None, conv_bias: bool = False,
        output_gate: bool = True, norm_eps: float = 1e-5,
    ) -> None:
        key_dim, value_dim, kv_heads = head_widths("retention", d_model, n_heads, expand_k, expand_v, n_kv_heads)
        if key_dim % 2:
            raise ValueError(f"retention: each key head's width ({key_dim}) must be even for the rotary "
                             "codes; change expand_k or n_heads")
        check_feature_map("retention", feature_map)
        activation = "silu" if short_conv is not None else None  # FLA: q, k, v are SiLU'd only by the convolution
        super().__init__(d_model, (n_heads, kv_heads, kv_heads), key_dim, value_dim,
                         short_conv, conv_bias, (activation,) * 3, output_gate, norm_eps)
        self.feature_map = feature_map
        inv_freq = ROTARY_BASE ** -(torch.arange(0, self.key_dim, 2, dtype=torch.float64) / self.key_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (Dk/2,)
        self.register_buffer("log_decays", retention_log_decays(self.op_heads), persistent=False)  # (H,)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None) -> tuple[Tensor, Tensor]:
        batch, heads, length, _ = q.shape
        if self.feature_map is not None:
            q, k = FEATURE_MAPS[self.feature_map](q), FEATURE_MAPS[self.feature_map](k)
        acc = memory.dtype
        present = torch.ones(batch, length, dtype=torch.bool, device=x.device) if padding is None else ~padding
        positions = present.cumsum(-1) - 1  # (B, N): real tokens before each; padding takes no position
        q, k = (rotate(t.to(acc), positions[:, None], self.inv_freq) for t in (q, k))  # (B, H, N, Dk)
        log_decay = self.log_decays.to(acc)[:, None].expand(batch, heads, length)  # (B, H, N)
        if padding is not None:
            absent = padding[:, None, :]  # (B, 1, N)
            k, log_decay = k.masked_fill(absent[..., None], 0.0), log_decay.masked_fill(absent, 0.0)
        out, final = decayed_dot_product(q * self.key_dim**-0.5, k, v.to(acc), log_decay, initial_state=memory,
                                         return_state=True, check_ranges=False)  # (B, H, N, Dv), (B, H, Dk, Dv)
        seen = present.sum(-1)[:, None, None]  # (B, 1, 1): the next position, relative to this call's start
        final = rotate(final.transpose(-1, -2), -seen, self.inv_freq).transpose(-1, -2)  # into the next frame
        return out.to(v.dtype), final
