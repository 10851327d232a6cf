"""The Gated DeltaNet layer recipe (``encoder.layer: recipe`` with ``gated_delta_net``), FLA's defaults."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.layers.delta_rule_layer import DeltaRuleLayer
from lintf.layers.recipe import width
from lintf.registry import register_layer

TIME_STEP_RANGE = (0.001, 0.1)
"""softplus(dt_bias) starts log-uniform in this range (Mamba2's initialisation, kept by Gated DeltaNet)."""
TIME_STEP_FLOOR = 1e-4
RATE_RANGE = (0.0, 16.0)
"""exp(A_log) starts uniform in this range."""


@register_layer("gated_delta_net")
class GatedDeltaNetLayer(DeltaRuleLayer):
    """Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025) as a layer, with the gate of Mamba2 read from the input:

        log alpha_t = -exp(A_log) * softplus(W_a x_t + dt_bias)      (one per value head)

    on top of the recipe of ``DeltaRuleLayer`` (SiLU and L2 norm on q and k, output gate by default).

    Args:
        d_model: model width.
        n_heads: query/key heads.
        head_dim: Dk, each query/key head's width; None: d_model // n_heads.
        expand_v: each value head's width Dv = expand_v * Dk.
        n_value_heads: value heads, a multiple of n_heads (grouped value heads); None: n_heads.
        short_conv: kernel size of the causal depthwise convolution on q, k, v; None: none.
        conv_bias: a bias in the short convolutions.
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        negative_eigenvalues: beta in (0, 2), so (I - beta k k^T) may reflect.
        norm_eps: the output RMSNorm's epsilon.
    """

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int | None = None, expand_v: float = 2.0,
        n_value_heads: int | None = None, short_conv: int | None = 4, conv_bias: bool = False,
        output_gate: bool = True, negative_eigenvalues: bool = False, norm_eps: float = 1e-5,
    ) -> None:
        key_dim = d_model // n_heads if head_dim is None else head_dim
        value_dim = width("gated_delta_net", "expand_v", key_dim, expand_v)
        super().__init__(d_model, n_heads, key_dim, value_dim, n_value_heads, short_conv, conv_bias, "silu", "l2",
                         True, negative_eigenvalues, output_gate, norm_eps)
        self.a_proj = nn.Linear(d_model, self.n_value_heads, bias=False)
        self.A_log = nn.Parameter(torch.empty(self.n_value_heads).uniform_(*RATE_RANGE).log())
        low, high = (math.log(bound) for bound in TIME_STEP_RANGE)
        time_step = torch.exp(torch.rand(self.n_value_heads) * (high - low) + low).clamp(min=TIME_STEP_FLOOR)
        self.dt_bias = nn.Parameter(time_step + torch.log(-torch.expm1(-time_step)))  # softplus^-1(time_step)

    def log_decay(self, x: Tensor) -> Tensor:
        """log alpha: x (B, N, d_model) -> (B, Hv, N) < 0."""
        time_step = F.softplus(self.a_proj(x) + self.dt_bias.to(x.dtype))  # (B, N, Hv)
        return (-self.A_log.to(x.dtype).exp() * time_step).transpose(1, 2)
