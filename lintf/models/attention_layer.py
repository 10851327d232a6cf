"""Multi-head projections around a registered attention: (B, N, d_model) in and out."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lintf.attention.base import Attention, State


class MultiHeadAttention(nn.Module):
    """Projects to H heads, runs ``attention`` on (B, H, N, D) and projects back.

    Args:
        d_model: model width; must be divisible by n_heads.
        n_heads: number of heads H.
        attention: a registered attention built for head_dim = d_model // n_heads.
    """

    def __init__(self, d_model: int, n_heads: int, attention: Attention) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.attention = attention
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, D)

    def forward(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: State | None = None,
        return_state: bool = False, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        """x (B, N, d_model) -> (out (B, N, d_model), the attention's state after x, or None without ``return_state``).

        ``state`` (causal only) continues a sequence whose earlier positions left it (from ``forward``
        with ``return_state`` or from ``step``); it is the attention's own and passes through unchanged.
        ``cu_seqlens`` (D + 1,): D documents packed in x (1, N, d_model), states of batch D (the attention contract).
        """
        q, k, v = (self._split_heads(proj(x)) for proj in (self.query, self.key, self.value))
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        if state is None and not return_state:
            attended, new_state = self.attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask,
                                                 **packed), None
        else:
            attended, new_state = self.attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask,
                                                 state=state, return_state=True, **packed)  # (B, H, N, D)
        batch, _, length, _ = attended.shape
        out = self.out(attended.transpose(1, 2).reshape(batch, length, -1))  # (B, N, d_model)
        return out, new_state if return_state else None

    def use_sequence_parallel(self, group: object) -> None:
        """Causal calls see this rank's part of sequences split across ``group`` (None: off)."""
        self.attention.use_sequence_parallel(group)

    def init_state(self, batch_size: int, device: torch.device | str | None, dtype: torch.dtype) -> State:
        return self.attention.init_state(batch_size, self.n_heads, self.head_dim, device=device, dtype=dtype)

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        """x_t (B, d_model) -> (B, d_model), advancing the attention's state by one position.

        The caller checks x_t (``TransformerEncoder.step``); q, k and v are then of the attention's
        shapes by construction, so its own per-step checks are skipped: decoding is step after step.
        """
        batch = x_t.shape[0]
        q_t, k_t, v_t = (proj(x_t).view(batch, self.n_heads, self.head_dim) for proj in (self.query, self.key, self.value))
        self.attention.require_causal("has no step")
        attended, state = self.attention.attend_step(q_t, k_t, v_t, state)  # (B, H, D)
        return self.out(attended.reshape(batch, -1)), state
