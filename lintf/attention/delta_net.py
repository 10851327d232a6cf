"""DeltaNet: linear attention whose state is rewritten by the delta rule instead of only added to.

    q_t, k_t <- q_t / |q_t|, k_t / |k_t|,    beta_t = sigmoid(w . k_t + b)  (times 2 with negative_eigenvalues)
    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    out_t = scale * S_t^T q_t

The state is a fast-weight memory (Schlag et al. 2021, "Linear Transformers Are Secretly Fast
Weight Programmers"): each step moves the value stored under k_t towards v_t by beta_t, so a key
written twice is overwritten rather than blurred. Queries and keys are L2-normalised and beta_t is a
sigmoid of a learned projection (w, b) of the key, one strength per head and position, as in
Yang et al. 2024 ("Parallelizing Linear Transformers with the Delta Rule over Sequence Length"),
where beta comes from the layer input; here, as ``gated_linear``'s gate, it comes from the
attention's own input, the key before normalisation (w, b shared by the heads). With
``negative_eigenvalues`` beta lies in (0, 2), so (I - beta k k^T) may reflect (Grazzi et al. 2025,
"Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues"). The layer's short
convolutions, output gate and norm of those papers are not part of the attention.

There is no softmax-like normaliser: the output is read from the memory as it is. Padded keys are
absent: they write nothing (beta 0). Non-causal: every query reads the memory the whole sequence
left, out_i = scale * S_S^T q_i, so queries and keys may have different lengths. The recurrence is
``lintf.ops.delta_rule``; the state is its ``MatrixState(kv=S (B, H, D, M))``, validated by the op.
Packed documents (``cu_seqlens``) go to the op causally; non-causal, one document at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.base import State
from lintf.attention.matrix_memory import MatrixMemoryAttention
from lintf.ops import MatrixState, accumulation_dtype, delta_rule
from lintf.registry import register_attention


@register_attention("delta_net")
class DeltaNetAttention(MatrixMemoryAttention):
    """The delta rule over L2-normalised queries and keys, with a writing strength computed from each key.

    Args:
        head_dim: D.
        scale: multiplies the memory's read-out S^T q; None uses 1/sqrt(D).
        negative_eigenvalues: beta = 2 sigmoid(.) in (0, 2) instead of sigmoid(.) in (0, 1).
    """

    supports_packed = True

    def __init__(self, head_dim: int, scale: float | None = None, negative_eigenvalues: bool = False) -> None:
        super().__init__(head_dim)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.beta_projection = nn.Linear(head_dim, 1)
        self.negative_eigenvalues = bool(negative_eigenvalues)

    def beta(self, k: Tensor) -> Tensor:
        """Writing strengths: raw keys (..., D) -> (...) in (0, 1), or (0, 2) with negative_eigenvalues."""
        weight, bias = self.beta_projection.weight.to(k.dtype), self.beta_projection.bias.to(k.dtype)
        beta = torch.sigmoid(F.linear(k, weight, bias).squeeze(-1))
        return 2 * beta if self.negative_eigenvalues else beta

    def log_decay(self, k: Tensor) -> Tensor | None:
        """Log-decay of the memory at each position, (...) <= 0; None: no decay (DeltaNet)."""
        return None

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and not causal:  # each document's queries read its own memory
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        acc, dtype = accumulation_dtype(v.dtype), v.dtype
        with torch.autocast(q.device.type, enabled=False):
            q, k, v = q.to(acc), k.to(acc), v.to(acc)
            beta, log_decay = self.beta(k), self.log_decay(k)  # (B, H, S), (B, H, S) or None
            keys = F.normalize(k, dim=-1)  # (B, H, S, D)
            if key_padding_mask is not None:
                absent = key_padding_mask[:, None, :]  # (B, 1, S)
                beta, keys = beta.masked_fill(absent, 0.0), keys.masked_fill(absent[..., None], 0.0)
                log_decay = None if log_decay is None else log_decay.masked_fill(absent, 0.0)
            queries = F.normalize(q, dim=-1)  # (B, H, N, D)
            if not causal:  # the keys write the memory; every query reads what they left
                _, memory = delta_rule(keys, keys, v, beta, log_decay=log_decay, return_state=True,
                                       check_ranges=False)  # (B, H, D, M): beta a sigmoid, log_decay <= 0 as built
                return (self.scale * queries @ memory).to(dtype), None
            out, final = delta_rule(
                queries, keys, v, beta, log_decay=log_decay, scale=self.scale,
                initial_state=None if state is None else state.kv, return_state=True, cu_seqlens=cu_seqlens,
                check_ranges=False,
            )  # (B, H, N, M), (B|D, H, D, M)
        return out.to(dtype), MatrixState(final) if return_state else None
