"""The GLA layer recipe (``encoder.layer: recipe`` with ``gla``), FLA's ``GatedLinearAttention`` defaults.

    log g_t = max(logsigmoid(W_up W_down x_t + b) / normalizer, clamp_min)      (per key channel, <= 0)
    S_t = diag(exp(log g_t)) S_{t-1} + phi(k_t) v_t^T,    o_t = Dk^-1/2 S_t^T phi(q_t)

inside the frame of ``lintf.layers.recipe`` (short convolutions off by default, output gate on); k, v
and the gate may have fewer heads than q, each shared by a group of query heads. The recurrence is
``lintf.ops.gated_linear_attention``.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lintf.layers.recipe import FEATURE_MAPS, RecipeLayer, check_feature_map, head_widths, positive_int
from lintf.ops import gated_linear_attention
from lintf.registry import register_layer


@register_layer("gla")
class GLALayer(RecipeLayer):
    """Gated Linear Attention (Yang et al. 2024) as a layer, its per-channel gate read from the input.

    Args:
        d_model: model width.
        n_heads: query heads H.
        expand_k: query/key width H * Dk = expand_k * d_model.
        expand_v: value width H * Dv = expand_v * d_model.
        n_kv_heads: key/value heads, dividing n_heads (grouped heads); None: n_heads.
        feature_map: applied to q and k ("relu", "silu"), or None.
        short_conv: kernel size of the causal depthwise convolution (with SiLU) on q, k, v; None: none.
        conv_bias: a bias in the short convolutions.
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        gate_rank: rank of the gate's projection d_model -> rank -> key width.
        gate_normalizer: divides the log-gate; larger keeps gates closer to 1.
        clamp_min: lower bound of the log-gate (<= 0), or None.
        norm_eps: the output RMSNorm's epsilon.
    """

    supports_packed = True

    def __init__(
        self, d_model: int, n_heads: int, expand_k: float = 0.5, expand_v: float = 1.0, n_kv_heads: int | None = None,
        feature_map: Literal["relu", "silu"] | None = None, short_conv: int | None = None, conv_bias: bool = False,
        output_gate: bool = True, gate_rank: int = 16, gate_normalizer: float = 16.0, clamp_min: float | None = None,
        norm_eps: float = 1e-5,
    ) -> None:
        key_dim, value_dim, kv_heads = head_widths("gla", d_model, n_heads, expand_k, expand_v, n_kv_heads)
        check_feature_map("gla", feature_map)
        if not gate_normalizer > 0:
            raise ValueError(f"gla: gate_normalizer must be > 0, got {gate_normalizer!r}")
        if clamp_min is not None and not clamp_min <= 0:
            raise ValueError(f"gla: clamp_min (a lower bound of log-gates) must be <= 0 or null, got {clamp_min!r}")
        activation = "silu" if short_conv is not None else None  # FLA: q, k, v are SiLU'd only by the convolution
        super().__init__(d_model, (n_heads, kv_heads, kv_heads), key_dim, value_dim,
                         short_conv, conv_bias, (activation,) * 3, output_gate, norm_eps)
        self.feature_map, self.gate_normalizer, self.clamp_min = feature_map, float(gate_normalizer), clamp_min
        self.gk_proj = nn.Sequential(nn.Linear(d_model, positive_int("gla", "gate_rank", gate_rank), bias=False),
                                     nn.Linear(gate_rank, kv_heads * self.key_dim))

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None, cu_seqlens: Tensor | None = None) -> tuple[Tensor, Tensor]:
        log_gate = F.logsigmoid(self._heads(self.gk_proj(x), self.heads[1])) / self.gate_normalizer  # (B, H, N, Dk)
        if self.clamp_min is not None:
            log_gate = log_gate.clamp_min(self.clamp_min)
        if self.feature_map is not None:
            q, k = FEATURE_MAPS[self.feature_map](q), FEATURE_MAPS[self.feature_map](k)
        if padding is not None:
            absent = padding[:, None, :, None]  # (B, 1, N, 1)
            k, log_gate = k.masked_fill(absent, 0.0), log_gate.masked_fill(absent, 0.0)
        return gated_linear_attention(q, k, v, log_gate, scale=self.key_dim**-0.5, initial_state=memory,
                                      return_state=True, cu_seqlens=cu_seqlens, check_ranges=False)  # <= 0 as built
