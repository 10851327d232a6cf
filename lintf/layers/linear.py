"""The linear-attention layer recipe (``encoder.layer: recipe`` with ``linear``), FLA's ``LinearAttention`` defaults.

    S_t = S_{t-1} + phi_k(k_t) v_t^T,    o_t = Dk^-1/2 S_t^T phi_q(q_t)       (no normaliser)

inside the frame of ``lintf.layers.recipe`` (no short convolution or output gate: an RMSNorm on the
output), with phi a learned "elementwise_product" map (W1 x + b1) * (W2 x + b2) per head by default
(Zhang et al. 2024, "The Hedgehog & the Porcupine") or a fixed one. The recurrence is
``lintf.ops.gated_linear_attention`` with every gate 1.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.layers.recipe import RecipeLayer, head_widths
from lintf.ops import gated_linear_attention
from lintf.registry import register_layer

FIXED_MAPS = {"elu": lambda x: F.elu(x) + 1.0, "relu": F.relu, "identity": lambda x: x}
SUM_NORM_EPS = 1e-4
"""Added to the sum that ``norm_q`` / ``norm_k`` divide by (FLA's constant)."""


class ElementwiseProductMap(nn.Module):
    """phi(x) = (W1 x + b1) * (W2 x + b2) on each head's last dimension.

    Args:
        dim: the head width.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer1(x) * self.layer2(x)


@register_layer("linear")
class LinearLayer(RecipeLayer):
    """Causal linear attention as a layer: feature maps on q and k, no normaliser, an RMSNorm on the output.

    Args:
        d_model: model width.
        n_heads: query heads H.
        expand_k: query/key width H * Dk = expand_k * d_model.
        expand_v: value width H * Dv = expand_v * d_model.
        n_kv_heads: key/value heads, dividing n_heads (grouped heads); None: n_heads.
        feature_map: "elementwise_product" (learned, one map for q and one for k) or a fixed map.
        tie_feature_map_qk: q and k share one learned map.
        norm_q: divide phi(q) by its sum.
        norm_k: divide phi(k) by its sum.
        norm_eps: the output RMSNorm's epsilon.
    """

    supports_packed = True

    def __init__(
        self, d_model: int, n_heads: int, expand_k: float = 1.0, expand_v: float = 1.0, n_kv_heads: int | None = None,
        feature_map: Literal["elementwise_product", "elu", "relu", "identity"] = "elementwise_product",
        tie_feature_map_qk: bool = False, norm_q: bool = False, norm_k: bool = False, norm_eps: float = 1e-5,
    ) -> None:
        key_dim, value_dim, kv_heads = head_widths("linear", d_model, n_heads, expand_k, expand_v, n_kv_heads)
        if feature_map != "elementwise_product" and feature_map not in FIXED_MAPS:
            raise ValueError(f"linear: feature_map must be one of elementwise_product, {', '.join(FIXED_MAPS)}; "
                             f"got {feature_map!r}")
        super().__init__(d_model, (n_heads, kv_heads, kv_heads), key_dim, value_dim, None,
                         False, (None, None, None), False, norm_eps)
        self.feature_map, self.norm_q, self.norm_k = feature_map, bool(norm_q), bool(norm_k)
        if feature_map == "elementwise_product":
            self.feature_map_q = ElementwiseProductMap(self.key_dim)
            self.feature_map_k = self.feature_map_q if tie_feature_map_qk else ElementwiseProductMap(self.key_dim)

    def _phi(self, x: Tensor, which: str, normalise: bool) -> Tensor:
        mapped = getattr(self, f"feature_map_{which}")(x) if self.feature_map == "elementwise_product" else \
            FIXED_MAPS[self.feature_map](x)
        return mapped / (mapped.sum(-1, keepdim=True) + SUM_NORM_EPS) if normalise else mapped

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None, cu_seqlens: Tensor | None = None) -> tuple[Tensor, Tensor]:
        q, k = self._phi(q, "q", self.norm_q), self._phi(k, "k", self.norm_k)  # (B, H, N, Dk)
        if padding is not None:
            k = k.masked_fill(padding[:, None, :, None], 0.0)
        no_decay = torch.zeros_like(k)  # every gate exp(0) = 1: the undecayed sum
        return gated_linear_attention(q, k, v, no_decay, scale=self.key_dim**-0.5, initial_state=memory,
                                      return_state=True, cu_seqlens=cu_seqlens, check_ranges=False)
