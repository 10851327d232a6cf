"""The attention contract, stated once. Every registered attention honours it.

Shapes (B batch, H heads, N queries, S keys, D query/key size, M value size):

* ``forward(q, k, v, *, causal, key_padding_mask=None)``: q (B, H, N, D), k (B, H, S, D),
  v (B, H, S, M) -> (B, H, N, M). ``key_padding_mask`` is (B, S) bool, True marks a padded key
  that must not be attended (torch.nn.MultiheadAttention's convention). ``causal=True``
  requires N == S: query i sees keys 0..i. A query that sees no key at all returns zeros.
* ``init_state(batch_size, n_heads, value_dim, device=..., dtype=...)`` -> state for decoding.
* Class attributes declare the exceptions, and the contract tests adapt to them:
  ``supports_causal = False``: non-causal only (e.g. clustered attention); ``forward(causal=True)``,
  ``init_state`` and ``step`` raise a ValueError naming the attentions that are causal.
  ``self_attention_only = True``: queries and keys are positions of one sequence (decays by
  distance), so N == S even without ``causal``. ``value_dim_is_head_dim = True``: M == D
  (element-wise attentions such as AFT). ``shares_query_key`` and ``step_matches_forward``: below.
* ``step(q_t, k_t, v_t, state)`` -> (out_t, new_state): q_t, k_t (B, H, D), v_t (B, H, M),
  out_t (B, H, M). Feeding positions 0..N-1 through ``step`` reproduces
  ``forward(..., causal=True)``. The state is a dict of tensors (plus an int length for caches);
  callers treat it as opaque and never mutate it.

Subclasses implement ``attend`` / ``attend_step`` / ``init_state``; the public ``forward`` and
``step`` validate inputs here so every implementation reports bad shapes the same way.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from lintf.registry import ATTENTIONS

State = dict[str, Any]


def _describe(t: Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


class Attention(nn.Module):
    """Base class of every attention.

    Args:
        head_dim: D, the size of each query/key head vector.
    """

    shares_query_key: ClassVar[bool] = False
    """True if ``k`` is ignored and derived from ``q`` (needs N == S); tests adapt to it."""
    step_matches_forward: ClassVar[bool] = True
    """False if ``step`` only approximates ``forward(causal=True)`` (say why in the class docstring),
    or if there is no step at all (``supports_causal = False``)."""
    supports_causal: ClassVar[bool] = True
    """False for non-causal-only attentions: ``causal=True``, ``init_state`` and ``step`` raise."""
    self_attention_only: ClassVar[bool] = False
    """True if N must equal S even when not causal (queries and keys share positions)."""
    value_dim_is_head_dim: ClassVar[bool] = False
    """True if the value size M must equal head_dim D (element-wise attentions)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        if not isinstance(head_dim, int) or head_dim <= 0:
            raise ValueError(f"{type(self).__name__}: head_dim must be a positive int, got {head_dim!r}")
        self.head_dim = head_dim

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """Attend queries to keys; see the module docstring for shapes."""
        self.check_inputs(q, k, v, causal, key_padding_mask)
        return self.attend(q, k, v, causal, key_padding_mask)

    def step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        """One causal decoding step; see the module docstring for shapes."""
        self.require_causal("has no step")
        self.check_step_inputs(q_t, k_t, v_t)
        return self.attend_step(q_t, k_t, v_t, state)

    def require_causal(self, what: str) -> None:
        """Raise ValueError naming this attention and the causal ones if it is non-causal only."""
        if self.supports_causal:
            return
        causal = [name for name in ATTENTIONS.names() if ATTENTIONS.get(name).supports_causal]
        raise ValueError(
            f"{self.display_name()} attention is non-causal only, so it {what}; use causal=False, or a causal "
            f"attention: {', '.join(causal)}"
        )

    @classmethod
    def display_name(cls) -> str:
        """The registry name of the class, or its class name if unregistered."""
        return getattr(cls, "registry_name", cls.__name__)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
        raise NotImplementedError

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        raise NotImplementedError

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        """Empty decoding state for ``batch_size`` sequences."""
        self.require_causal("has no decoding state")
        raise NotImplementedError

    def check_inputs(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> None:
        """Raise ValueError describing what was expected if q, k, v, mask break the contract."""
        name = type(self).__name__
        for label, tensor in (("q", q), ("k", k), ("v", v)):
            if not isinstance(tensor, Tensor) or tensor.dim() != 4 or not tensor.is_floating_point():
                got = _describe(tensor) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(f"{name}: {label} must be a 4-D float tensor (B, H, N|S, D|M), got {got}")
        self._check_same_kind(q, k, v)
        batch, heads, n_queries, dim = q.shape
        if k.shape[:2] != (batch, heads) or k.shape[3] != self.head_dim or dim != self.head_dim:
            raise ValueError(
                f"{name}: expected q (B, H, N, {self.head_dim}) and k (B, H, S, {self.head_dim}) with the "
                f"same B, H; got q {tuple(q.shape)}, k {tuple(k.shape)}"
            )
        if v.shape[:3] != k.shape[:3]:
            raise ValueError(f"{name}: v must be (B, H, S, M) matching k {tuple(k.shape)}, got {tuple(v.shape)}")
        if (causal or self.shares_query_key or self.self_attention_only) and n_queries != k.shape[2]:
            if causal:
                why = "causal attention"
            elif self.shares_query_key:
                why = "shared query-key attention"
            else:
                why = "self-attention (queries and keys share positions)"
            raise ValueError(f"{name}: {why} needs as many queries as keys, got N={n_queries}, S={k.shape[2]}")
        if self.value_dim_is_head_dim and v.shape[3] != self.head_dim:
            raise ValueError(
                f"{name}: values must have the head size M = D = {self.head_dim} (element-wise attention), "
                f"got v {tuple(v.shape)}"
            )
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (batch, k.shape[2]):
                raise ValueError(
                    f"{name}: key_padding_mask must be a bool tensor (B, S) = ({batch}, {k.shape[2]}) with True "
                    f"for padding, got {_describe(key_padding_mask)}"
                )
        if causal:
            self.require_causal("cannot run with causal=True")

    def check_step_inputs(self, q_t: Tensor, k_t: Tensor, v_t: Tensor) -> None:
        """Raise ValueError unless q_t, k_t are (B, H, D) and v_t is (B, H, M)."""
        name = type(self).__name__
        for label, tensor in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
            if not isinstance(tensor, Tensor) or tensor.dim() != 3 or not tensor.is_floating_point():
                got = _describe(tensor) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(f"{name}.step: {label} must be a 3-D float tensor (B, H, D|M), got {got}")
        self._check_same_kind(q_t, k_t, v_t)
        expected = (*q_t.shape[:2], self.head_dim)
        if tuple(q_t.shape) != expected or tuple(k_t.shape) != expected or v_t.shape[:2] != q_t.shape[:2]:
            raise ValueError(
                f"{name}.step: expected q_t, k_t (B, H, {self.head_dim}) and v_t (B, H, M) with the same B, H; "
                f"got {tuple(q_t.shape)}, {tuple(k_t.shape)}, {tuple(v_t.shape)}"
            )
        if self.value_dim_is_head_dim and v_t.shape[2] != self.head_dim:
            raise ValueError(
                f"{name}.step: v_t must have the head size M = D = {self.head_dim} (element-wise attention), "
                f"got {tuple(v_t.shape)}"
            )

    def _check_same_kind(self, q: Tensor, k: Tensor, v: Tensor) -> None:
        if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
            raise ValueError(
                f"{type(self).__name__}: q, k, v must share dtype and device, got "
                f"{q.dtype}/{q.device}, {k.dtype}/{k.device}, {v.dtype}/{v.device}"
            )
