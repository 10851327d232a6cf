"""GLA: linear attention whose state forgets each key channel at its own data-dependent rate.

    log g_t = logsigmoid(W_up W_down k_t + b) / temperature          (D per-channel log-gates, <= 0)
    S_t = diag(exp(log g_t)) S_{t-1} + k_t v_t^T,    out_t = scale * S_t^T q_t

Gated Linear Attention (Yang et al. 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training"): the gate is a low-rank projection (rank 16 there and by default)
followed by logsigmoid and divided by a temperature (16 there and by default), which keeps gates
close to 1 at initialisation; q and k enter without a feature map or normaliser, the output is
scaled by 1/sqrt(D). There the gate reads the layer input; here, as ``gated_linear``'s scalar gate,
it reads the key (W_down, W_up, b shared by the heads). ``gated_linear`` forgets the whole state
at one rate per position; GLA's gate is a vector, so each key channel keeps its own horizon. The
layer's output gate and norm of the paper are not part of the attention.

Padded keys are absent: they add nothing and do not decay the state. Non-causal: key j reaches
query i through the gates of the positions after the earlier of the two up to the later one
(queries and keys share positions), computed as a causal pass, a causal pass over the reversed
sequence, minus the diagonal counted by both. The recurrence is ``lintf.ops.gated_linear_attention``;
the state is its ``MatrixState(kv=S (B, H, D, M))``, validated by the op. Packed documents
(``cu_seqlens``) go to the op causally; non-causal, one document at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.base import State
from lintf.attention.matrix_memory import MatrixMemoryAttention
from lintf.ops import MatrixState, accumulation_dtype, gated_linear_attention
from lintf.registry import register_attention


@register_attention("gla")
class GLAAttention(MatrixMemoryAttention):
    """Linear attention with a per-channel forget gate computed from each key by a low-rank projection.

    Args:
        head_dim: D.
        gate_rank: rank of the gate's projection D -> rank -> D.
        temperature: divides the log-gate; larger keeps gates closer to 1.
        scale: multiplies q.k; None uses 1/sqrt(D).
    """

    self_attention_only = True
    supports_packed = True

    def __init__(
        self, head_dim: int, gate_rank: int = 16, temperature: float = 16.0, scale: float | None = None
    ) -> None:
        super().__init__(head_dim)
        if isinstance(gate_rank, bool) or not isinstance(gate_rank, int) or gate_rank < 1:
            raise ValueError(f"gla: gate_rank must be a positive int, got {gate_rank!r}")
        if not temperature > 0:
            raise ValueError(f"gla: temperature must be > 0, got {temperature!r}")
        self.gate_down = nn.Linear(head_dim, gate_rank, bias=False)
        self.gate_up = nn.Linear(gate_rank, head_dim)
        self.temperature = float(temperature)
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def log_gate(self, k: Tensor) -> Tensor:
        """Per-channel log-gates: keys (..., D) -> (..., D), <= 0."""
        low = F.linear(k, self.gate_down.weight.to(k.dtype))  # (..., rank)
        logits = F.linear(low, self.gate_up.weight.to(k.dtype), self.gate_up.bias.to(k.dtype))  # (..., D)
        return F.logsigmoid(logits) / self.temperature

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and not causal:  # the gates between two documents would join them
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        acc, dtype = accumulation_dtype(v.dtype), v.dtype
        with torch.autocast(q.device.type, enabled=False):
            q, k, v = q.to(acc), k.to(acc), v.to(acc)
            log_gate = self.log_gate(k)  # (B, H, N, D)
            if key_padding_mask is not None:
                absent = key_padding_mask[:, None, :, None]  # (B, 1, N, 1)
                k, log_gate = k.masked_fill(absent, 0.0), log_gate.masked_fill(absent, 0.0)
            if not causal:
                return self.bidirectional(q, k, v, log_gate).to(dtype), None
            out, final = gated_linear_attention(
                q, k, v, log_gate, scale=self.scale, initial_state=None if state is None else state.kv,
                return_state=True, cu_seqlens=cu_seqlens, check_ranges=False,  # log-sigmoids: <= 0
            )  # (B, H, N, M), (B|D, H, D, M)
        return out.to(dtype), MatrixState(final) if return_state else None

    def bidirectional(self, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> Tensor:
        """out_i = scale sum_j q_i^T diag(gates strictly after min(i, j) up to max(i, j)) k_j v_j: (B, H, N, M)."""
        forward = gated_linear_attention(q, k, v, log_gate, scale=self.scale, check_ranges=False)  # log-sigmoids
        # reversed, the gate between reversed positions t-1 and t is the original one at N - t
        reversed_gate = F.pad(log_gate.flip(2)[:, :, :-1], (0, 0, 1, 0))  # (B, H, N, D)
        backward = gated_linear_attention(q.flip(2), k.flip(2), v.flip(2), reversed_gate, scale=self.scale,
                                          check_ranges=False).flip(2)
        diagonal = self.scale * (q * k).sum(-1, keepdim=True) * v  # (B, H, N, M): counted by both passes
        return forward + backward - diagonal
