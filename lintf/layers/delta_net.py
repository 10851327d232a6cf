"""The DeltaNet layer recipe (``encoder.layer: recipe`` with ``delta_net``), FLA's ``DeltaNet`` defaults."""

from __future__ import annotations

from typing import Literal

from lintf.layers.delta_rule_layer import DeltaRuleLayer, QKActivation
from lintf.layers.recipe import width
from lintf.registry import register_layer


@register_layer("delta_net")
class DeltaNetLayer(DeltaRuleLayer):
    """DeltaNet (Yang et al. 2024) as a layer: the delta rule read through the recipe of ``DeltaRuleLayer``.

    Args:
        d_model: model width.
        n_heads: heads (queries, keys and values alike).
        expand_k: query/key width n_heads * Dk = expand_k * d_model.
        expand_v: value width n_heads * Dv = expand_v * d_model.
        short_conv: kernel size of the causal depthwise convolution on q, k, v; None: none.
        conv_bias: a bias in the short convolutions.
        qk_activation: applied to q and k before their norm.
        qk_norm: "l2" or "sum" normalisation of q and k.
        learned_beta: beta = sigmoid of a projection of the input; False writes with beta 1.
        negative_eigenvalues: beta in (0, 2), so (I - beta k k^T) may reflect.
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        norm_eps: the output RMSNorm's epsilon.
    """

    def __init__(
        self, d_model: int, n_heads: int, expand_k: float = 1.0, expand_v: float = 1.0, short_conv: int | None = 4,
        conv_bias: bool = False, qk_activation: QKActivation = "silu", qk_norm: Literal["l2", "sum"] = "l2",
        learned_beta: bool = True, negative_eigenvalues: bool = False, output_gate: bool = False,
        norm_eps: float = 1e-5,
    ) -> None:
        key_width, value_width = width("delta_net", "expand_k", d_model, expand_k), width("delta_net", "expand_v",
                                                                                          d_model, expand_v)
        if key_width % n_heads or value_width % n_heads:
            raise ValueError(f"delta_net: key width {key_width} and value width {value_width} must be multiples of "
                             f"n_heads ({n_heads})")
        super().__init__(d_model, n_heads, key_width // n_heads, value_width // n_heads, None, short_conv, conv_bias,
                         qk_activation, qk_norm, learned_beta, negative_eigenvalues, output_gate, norm_eps)
