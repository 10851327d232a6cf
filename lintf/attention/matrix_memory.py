"""The part of the attentions whose state is one (D x M) matrix per head (``delta_net``, ``gla``): state and step.

Their recurrences live in the ops (``lintf.ops.delta_rule``, ``lintf.ops.gated_linear_attention``),
which take the state in and give it back; a decoding step is the causal forward of one position,
so ``step`` runs exactly the computation ``forward`` runs. The ops see the bare tensor S, so the
state's fields are checked here, where their names are known (``state.kv must have shape ...``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.state import check_state
from lintf.ops import MatrixState, accumulation_dtype


class MatrixMemoryAttention(Attention):
    """An attention whose causal state is the op's ``MatrixState(kv=S (B, H, D, M))``.

    Args:
        head_dim: D.
    """

    def check_state_request(self, q: Tensor, v: Tensor, causal: bool, state: State | None) -> None:
        super().check_state_request(q, v, causal, state)
        if state is not None:
            expected = self.init_state(q.shape[0], q.shape[1], v.shape[3], device="meta", dtype=q.dtype)
            check_state(type(self).__name__, state, expected, q.device, self.cache_entries)

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> MatrixState:
        acc = accumulation_dtype(dtype)
        return MatrixState(torch.zeros(batch_size, n_heads, self.head_dim, value_dim, device=device, dtype=acc))

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: MatrixState) -> tuple[Tensor, MatrixState]:
        out, state = self.attend(
            q_t[:, :, None], k_t[:, :, None], v_t[:, :, None], causal=True, key_padding_mask=None, state=state,
            return_state=True,
        )  # (B, H, 1, M)
        return out[:, :, 0], state
