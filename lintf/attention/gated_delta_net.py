"""Gated DeltaNet: DeltaNet whose memory also decays by a data-dependent factor at every position.

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    out_t = scale * S_t^T q_t
    log alpha_t = -exp(a) * softplus(w . k_t + b)

with q, k L2-normalised and beta_t = sigmoid(w' . k_t + b') as in ``delta_net``. The decay follows
Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025, "Gated Delta Networks: Improving Mamba2 with Delta
Rule"), which takes Mamba2's form: a positive rate exp(a) times a softplus "time step" of a learned
projection. There the rate is one per head and the projection reads the layer input; here, as
``gated_linear``'s gate, the projection (w, b) reads the key before normalisation and the rate a is
one scalar, both shared by the heads. At initialisation a = 0 and softplus(b) = 0.01, so the memory
keeps about 0.99 of itself per position; the decay gates forgetting as a whole (alpha_t -> 0
clears the memory), the delta rule rewrites single keys.

Padded keys are absent: they write nothing and do not decay the memory. Non-causal: every query
reads the memory the whole sequence left (decays included). The state is the delta rule's
``MatrixState(kv=S (B, H, D, M))``, validated by the op.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.delta_net import DeltaNetAttention
from lintf.registry import register_attention

INITIAL_TIME_STEP = 0.01
"""softplus(b) at initialisation: a decay of about exp(-0.01) = 0.99 per position."""


@register_attention("gated_delta_net")
class GatedDeltaNetAttention(DeltaNetAttention):
    """DeltaNet with a forget gate alpha_t = exp(-exp(a) softplus(w . k_t + b)) computed from each key.

    Args:
        head_dim: D.
        scale: multiplies the memory's read-out S^T q; None uses 1/sqrt(D).
        negative_eigenvalues: beta = 2 sigmoid(.) in (0, 2) instead of sigmoid(.) in (0, 1).
    """

    def __init__(self, head_dim: int, scale: float | None = None, negative_eigenvalues: bool = False) -> None:
        super().__init__(head_dim, scale, negative_eigenvalues)
        self.decay_projection = nn.Linear(head_dim, 1)
        with torch.no_grad():
            self.decay_projection.bias.fill_(math.log(math.expm1(INITIAL_TIME_STEP)))  # softplus^-1
        self.log_rate = nn.Parameter(torch.zeros(1))

    def log_decay(self, k: Tensor) -> Tensor:
        """log alpha: raw keys (..., D) -> (...), < 0."""
        weight, bias = self.decay_projection.weight.to(k.dtype), self.decay_projection.bias.to(k.dtype)
        return -self.log_rate.to(k.dtype).exp() * F.softplus(F.linear(k, weight, bias).squeeze(-1))
