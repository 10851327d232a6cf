"""The gated-linear layer recipe (``encoder.layer: recipe`` with ``gated_linear``), FLA's
``SimpleGatedLinearAttention`` defaults.

    log a_t = logsigmoid(W_a x_t + b_a) / normalizer          (one scalar gate per head, <= 0)
    S_t = a_t S_{t-1} + k_t v_t^T,    o_t = Dk^-1/2 S_t^T q_t

lintf's ``gated_linear`` attention forgets at one rate per step and head, read from the key; FLA has
no layer of that name, and the closest is ``fla.layers.SimpleGatedLinearAttention`` (GLA with its gate
head-wise instead of per channel), which this recipe follows: the gate is read from the layer's input,
one per query head, and the short convolutions (kernel 4) with SiLU are on by default, as is the
output gate (a gated RMSNorm). Unlike the bare attention there is no normaliser phi(q).z: the RMSNorm
sets the output's scale. The recurrence is ``lintf.ops.decayed_dot_product``.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lintf.layers.recipe import FEATURE_MAPS, RecipeLayer, check_feature_map, head_widths
from lintf.ops import decayed_dot_product
from lintf.registry import register_layer


@register_layer("gated_linear")
class GatedLinearLayer(RecipeLayer):
    """Linear attention with a data-dependent scalar forget gate per head, as a layer.

    Args:
        d_model: model width.
        n_heads: query heads H, each with its own gate.
        expand_k: query/key width H * Dk = expand_k * d_model.
        expand_v: value width H * Dv = expand_v * d_model.
        n_kv_heads: key/value heads, dividing n_heads (grouped heads); None: n_heads.
        feature_map: applied to q and k ("relu", "silu"), or None.
        short_conv: kernel size of the causal depthwise convolution (with SiLU) on q, k, v; None: none.
        conv_bias: a bias in the short convolutions.
        gate_normalizer: divides the log-gate; larger keeps gates closer to 1.
        norm_eps: the output RMSNorm's epsilon.
    """

    def __init__(
        self, d_model: int, n_heads: int, expand_k: float = 1.0, expand_v: float = 1.0, n_kv_heads: int | None = None,
        feature_map: Literal["relu", "silu"] | None = None, short_conv: int | None = 4, conv_bias: bool = False,
        gate_normalizer: float = 16.0, norm_eps: float = 1e-5,
    ) -> None:
        key_dim, value_dim, kv_heads = head_widths("gated_linear", d_model, n_heads, expand_k, expand_v, n_kv_heads)
        check_feature_map("gated_linear", feature_map)
        if not gate_normalizer > 0:
            raise ValueError(f"gated_linear: gate_normalizer must be > 0, got {gate_normalizer!r}")
        activation = "silu" if short_conv is not None else None  # FLA: q, k, v are SiLU'd only by the convolution
        super().__init__(d_model, (n_heads, kv_heads, kv_heads), key_dim, value_dim,
                         short_conv, conv_bias, (activation,) * 3, True, norm_eps)
        self.feature_map, self.gate_normalizer = feature_map, float(gate_normalizer)
        self.gk_proj = nn.Linear(d_model, n_heads)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None) -> tuple[Tensor, Tensor]:
        log_gate = (F.logsigmoid(self.gk_proj(x)) / self.gate_normalizer).transpose(1, 2)  # (B, H, N)
        if self.feature_map is not None:
            q, k = FEATURE_MAPS[self.feature_map](q), FEATURE_MAPS[self.feature_map](k)
        if padding is not None:
            absent = padding[:, None, :]  # (B, 1, N)
            k, log_gate = k.masked_fill(absent[..., None], 0.0), log_gate.masked_fill(absent, 0.0)
        acc = memory.dtype
        out, final = decayed_dot_product((q * self.key_dim**-0.5).to(acc), k.to(acc), v.to(acc), log_gate.to(acc),
                                         initial_state=memory, return_state=True,
                                         check_ranges=False)  # log-sigmoids: (B, H, N, Dv), (B, H, Dk, Dv)
        return out.to(v.dtype), final
