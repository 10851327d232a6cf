"""The layer recipe around the delta rule (``lintf.layers.recipe`` frame), as FLA's DeltaNet and GatedDeltaNet:

    q, k    <- normalise(act(q)), normalise(act(k))                     (per head: L2, or by their sum)
    beta_t   = sigmoid(W_b x_t)  (times 2 with negative eigenvalues)    (one per value head)
    S_t      = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = Dk^-1/2 S_t^T q_t

with Hk query/key heads shared by groups of the Hv value heads; alpha_t is 1 for DeltaNet and the
subclass's gate otherwise (``log_decay``). The recurrence is ``lintf.ops.delta_rule``.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.layers.recipe import RecipeLayer, positive_int
from lintf.ops import delta_rule

QKActivation = Literal["silu", "relu", "elu", "identity"]
QK_ACTIVATIONS = {"silu": F.silu, "relu": F.relu, "elu": lambda x: F.elu(x) + 1.0, "identity": lambda x: x}


class DeltaRuleLayer(RecipeLayer):
    """The shared recipe of ``delta_net`` and ``gated_delta_net`` layers; subclasses fix options and the gate.

    Args:
        d_model: model width, read and written.
        n_heads: Hk, query/key heads.
        key_dim: Dk, each query/key head's width.
        value_dim: Dv, each value head's width.
        n_value_heads: Hv, value heads; a multiple of n_heads (grouped value heads), None for n_heads.
        short_conv: K, the short convolution's kernel size; None: no convolution.
        conv_bias: a bias in the short convolutions.
        qk_activation: applied to q and k after the convolution.
        qk_norm: "l2" divides q and k by their norm, "sum" by their sum.
        learned_beta: beta from a projection of the input; False writes with beta 1.
        negative_eigenvalues: beta in (0, 2) instead of (0, 1).
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        norm_eps: the output RMSNorm's epsilon.
    """

    supports_packed = True

    def __init__(
        self, d_model: int, n_heads: int, key_dim: int, value_dim: int, n_value_heads: int | None,
        short_conv: int | None, conv_bias: bool, qk_activation: QKActivation, qk_norm: Literal["l2", "sum"],
        learned_beta: bool, negative_eigenvalues: bool, output_gate: bool, norm_eps: float,
    ) -> None:
        owner = type(self).__name__
        value_heads = n_heads if n_value_heads is None else positive_int(owner, "n_value_heads", n_value_heads)
        if value_heads % positive_int(owner, "n_heads", n_heads):
            raise ValueError(f"{owner}: n_value_heads ({value_heads}) must be a multiple of n_heads ({n_heads})")
        if qk_activation not in QK_ACTIVATIONS:
            raise ValueError(f"{owner}: qk_activation must be one of {', '.join(QK_ACTIVATIONS)}, "
                             f"got {qk_activation!r}")
        if qk_norm not in ("l2", "sum"):
            raise ValueError(f"{owner}: qk_norm must be 'l2' or 'sum', got {qk_norm!r}")
        super().__init__(d_model, (n_heads, n_heads, value_heads), key_dim, value_dim, short_conv, conv_bias,
                         (None, None, "silu"), output_gate, norm_eps)
        self.n_heads, self.n_value_heads = n_heads, value_heads
        self.qk_activation, self.qk_norm, self.negative_eigenvalues = qk_activation, qk_norm, bool(negative_eigenvalues)
        self.b_proj = nn.Linear(d_model, value_heads, bias=False) if learned_beta else None

    def log_decay(self, x: Tensor) -> Tensor | None:
        """log alpha per position and value head: x (B, N, d_model) -> (B, Hv, N) <= 0; None: no decay."""
        return None

    def _normalise(self, x: Tensor) -> Tensor:
        x = QK_ACTIVATIONS[self.qk_activation](x)
        return F.normalize(x, dim=-1) if self.qk_norm == "l2" else x / x.sum(-1, keepdim=True)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None, cu_seqlens: Tensor | None = None) -> tuple[Tensor, Tensor]:
        beta = torch.ones_like(v[..., 0]) if self.b_proj is None else torch.sigmoid(self.b_proj(x)).transpose(1, 2)
        beta = 2 * beta if self.negative_eigenvalues else beta  # (B, Hv, N)
        log_decay = self.log_decay(x)
        if padding is not None:
            beta = beta.masked_fill(padding[:, None], 0.0)
            log_decay = None if log_decay is None else log_decay.masked_fill(padding[:, None], 0.0)
        return delta_rule(self._normalise(q), self._normalise(k), v, beta, log_decay=log_decay,
                          scale=self.key_dim**-0.5, initial_state=memory, return_state=True, cu_seqlens=cu_seqlens,
                          check_ranges=False)  # beta a sigmoid (x2), log_decay minus a softplus
