"""The attention contract, stated once. Every registered attention honours it.

Shapes (B batch, H heads, N queries, S keys, D query/key size, M value size):

* ``forward(q, k, v, *, causal, key_padding_mask=None, state=None, return_state=False)``:
  q (B, H, N, D), k (B, H, S, D), v (B, H, S, M) -> (B, H, N, M). ``key_padding_mask`` is (B, S)
  bool, True marks a padded key that must not be attended (torch.nn.MultiheadAttention's
  convention). ``causal=True`` requires N == S: query i sees keys 0..i. A query that sees no key
  at all returns zeros. Empty inputs (B == 0 or N == 0) give empty outputs.
* State (causal only): ``forward(..., state=s)`` continues a sequence whose earlier positions left
  ``s``: query i also sees every earlier key. ``return_state=True`` returns ``(out, state)``, the
  state after the call's last position. States from ``forward``, ``init_state`` and ``step`` are
  one type, so a sequence split anywhere, its pieces run by ``forward`` or ``step`` in any order,
  reproduces the unsplit ``forward`` (outputs and gradients, which reach the earlier pieces
  through the state), unless the class sets ``continues_exactly = False``. With ``key_padding_mask`` the mask covers the call's own keys: a padded key
  adds nothing to the state (recurrent sums skip it, caches mark it never visible), and a padded
  sequence split anywhere reproduces the unsplit padded forward. ``state`` or ``return_state``
  with ``causal=False``, or a state of another structure, shape, dtype or device than
  ``init_state`` gives for the call, raise a ValueError.
* Packed documents: ``forward(..., cu_seqlens=c)`` reads one row holding D documents end to end, with
  boundaries ``c`` (D + 1,) int rising strictly from 0 to N as in flash-attn and flash-linear-attention
  (``lintf.attention.documents``): q, k, v are (1, H, N, D|M), N == S, causal or not, and no position
  attends across a document boundary, so the output equals each document run alone. A recurrent state
  resets at each document start; ``state`` (if any) and the returned state hold one entry per document
  (batch D), so a row of documents continues from, and leaves, the states of those documents. A
  ``key_padding_mask`` with ``cu_seqlens`` is refused: a packed row has no padding. Attentions with
  ``supports_packed = True`` take ``cu_seqlens`` in ``attend`` (a block-diagonal mask, or the op's
  own boundaries); for the others the base class runs each document alone through ``attend`` and
  concatenates, the reference every packed form must equal. Caches of past keys (``cache_entries``)
  join into one packed state only for documents of equal length.
* ``init_state(batch_size, n_heads, value_dim, device=..., dtype=...)`` -> the state of an empty prefix.
* ``step(q_t, k_t, v_t, state)`` -> (out_t, new_state): q_t, k_t (B, H, D), v_t (B, H, M),
  out_t (B, H, M); one position of ``forward(..., causal=True)``. The state is the NamedTuple type
  ``init_state`` returns (``lintf.attention.state``): the op's own state (``LinearAttentionState``),
  a ``KVCache`` or a type of the attention's; callers treat it as opaque and never mutate it.
* Class attributes declare the exceptions, and the contract tests adapt to them:
  ``supports_causal = False``: non-causal only (e.g. clustered attention); ``forward(causal=True)``,
  ``init_state`` and ``step`` raise a ValueError naming the attentions that are causal.
  ``self_attention_only = True``: queries and keys are positions of one sequence (decays by
  distance), so N == S even without ``causal``. ``value_dim_is_head_dim = True``: M == D
  (element-wise attentions such as AFT). ``shares_query_key``, ``step_matches_forward``,
  ``continues_exactly``, ``cache_entries`` and ``supports_packed``: below.

Subclasses implement ``attend`` / ``attend_step`` / ``init_state``; the public ``forward`` and
``step`` validate inputs here so every implementation reports bad shapes the same way.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from lintf.attention.documents import (
    check_cu_seqlens,
    check_packed_call,
    join_documents,
    per_sequence_fields,
    select_document,
)
from lintf.attention.state import State, check_state, check_state_type
from lintf.ops import OP_STATES
from lintf.registry import ATTENTIONS


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
    continues_exactly: ClassVar[bool] = True
    """False if a sequence split into pieces (``forward`` with ``state`` / ``return_state``) only
    approximates the unsplit forward (say why in the class docstring)."""
    cache_entries: ClassVar[tuple[str, ...]] = ()
    """State fields that grow with time along dim 2 (KV caches) and hold ``state.length`` positions."""
    supports_packed: ClassVar[bool] = False
    """True if ``attend`` takes ``cu_seqlens`` (packed documents) itself; otherwise the base class runs each
    document alone through ``attend``."""
    supports_sequence_parallel: ClassVar[bool] = False
    """True if causal ``forward`` can run on one part of a sequence split across ranks (``use_sequence_parallel``)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        if not isinstance(head_dim, int) or head_dim <= 0:
            raise ValueError(f"{type(self).__name__}: head_dim must be a positive int, got {head_dim!r}")
        self.head_dim = head_dim
        self.sequence_parallel_group: Any = None

    def use_sequence_parallel(self, group: Any) -> None:
        """Causal calls see this rank's consecutive part of each sequence split across ``group`` (None: off)."""
        if group is not None and not self.supports_sequence_parallel:
            raise ValueError(f"{type(self).__name__} cannot split a sequence across ranks; attentions that can: those "
                             "with supports_sequence_parallel (linear and its feature-map variants)")
        self.sequence_parallel_group = group

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        key_padding_mask: Tensor | None = None,
        state: State | None = None,
        return_state: bool = False,
        cu_seqlens: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, State]:
        """Attend queries to keys; see the module docstring for shapes, states and packed documents.

        Args:
            q: (B, H, N, D) queries.
            k: (B, H, S, D) keys.
            v: (B, H, S, M) values.
            causal: query i sees keys 0..i only (N == S).
            key_padding_mask: (B, S) bool, True marks a padded key.
            state: the state earlier positions left (causal only); None starts a sequence.
            return_state: also return the state after the last position (causal only).
            cu_seqlens: (D + 1,) int boundaries of D documents packed in one row (B = 1); states then
                have batch D, one entry per document.

        Returns:
            (B, H, N, M), and with ``return_state`` the pair (out, state).
        """
        self.check_inputs(q, k, v, causal, key_padding_mask)
        if cu_seqlens is not None:
            return self._forward_packed(q, k, v, causal, key_padding_mask, state, return_state, cu_seqlens)
        if state is not None or return_state:
            self.check_state_request(q, v, causal, state)
        if q.shape[2] == 0:  # no query: the state after no positions is the one before them
            out = v.new_zeros(*q.shape[:3], v.shape[3])  # (B, H, 0, M)
            if return_state and state is None:
                state = self.init_state(q.shape[0], q.shape[1], v.shape[3], device=q.device, dtype=q.dtype)
            return (out, state) if return_state else out
        out, new_state = self.attend(
            q, k, v, causal=causal, key_padding_mask=key_padding_mask, state=state, return_state=return_state
        )
        if not return_state:
            return out
        if new_state is None:
            raise NotImplementedError(f"{type(self).__name__}.attend returned no state although return_state=True")
        return out, new_state

    def _forward_packed(
        self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor,
    ) -> Tensor | tuple[Tensor, State]:
        """``forward`` of the documents packed in one row (checked here), natively or one document at a time."""
        name = type(self).__name__
        documents = check_packed_call(name, q, k, key_padding_mask, cu_seqlens)
        if state is not None or return_state:  # a state has one entry per document
            self.check_state_request(q.expand(documents, -1, -1, -1), v.expand(documents, -1, -1, -1), causal, state)
        if self.supports_packed:
            out, new_state = self.attend(q, k, v, causal=causal, key_padding_mask=None, state=state,
                                         return_state=return_state, cu_seqlens=cu_seqlens)
        else:
            out, new_state = self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        if not return_state:
            return out
        if new_state is None:
            raise NotImplementedError(f"{name}.attend returned no state although return_state=True")
        return out, new_state

    def attend_documents(
        self, q: Tensor, k: Tensor, v: Tensor, causal: bool, state: State | None, return_state: bool,
        cu_seqlens: Tensor,
    ) -> tuple[Tensor, State | None]:
        """Each packed document alone through ``attend``: the reference of every packed form.

        Args:
            q: (1, H, N, D) queries of the packed row.
            k: (1, H, N, D) keys.
            v: (1, H, N, M) values.
            causal: query i sees keys 0..i of its document.
            state: the documents' states (batch D) or None.
            return_state: also return the documents' states after them (batch D).
            cu_seqlens: (D + 1,) the document boundaries, from 0 to N.

        Returns:
            (1, H, N, M) and the joined states (or None).
        """
        bounds = check_cu_seqlens(type(self).__name__, cu_seqlens, q.shape[2])
        outs, states = [], []
        per_sequence = () if state is None and not return_state else per_sequence_fields(
            self.init_state, q.shape[1], v.shape[3], q.dtype)
        for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
            out, new_state = self.attend(
                q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], causal=causal, key_padding_mask=None,
                state=select_document(state, index, per_sequence), return_state=return_state,
            )  # (1, H, n_d, M)
            outs.append(out)
            states.append(new_state)
        joined = join_documents(type(self).__name__, states, self.cache_entries, per_sequence) if return_state \
            else None
        return torch.cat(outs, dim=2), joined  # (1, H, N, M)

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

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        key_padding_mask: Tensor | None,
        state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        """Validated inputs (N > 0) -> (out (B, H, N, M), the state after the last position or None).

        ``state`` and ``return_state`` come only with ``causal=True``; the state must be returned when
        ``return_state`` is True and may be None otherwise. With ``supports_packed`` it also takes
        ``cu_seqlens`` (checked; q, k, v (1, H, N, .), no padding mask, states of batch D) and may hand
        what it cannot serve natively to ``attend_documents``.
        """
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

    def check_state_request(self, q: Tensor, v: Tensor, causal: bool, state: State | None) -> None:
        """Raise ValueError unless the call is causal and ``state`` (if any) is what ``init_state`` gives."""
        self.require_causal("has no state")
        name = type(self).__name__
        if not causal:
            raise ValueError(
                f"{name}: state and return_state continue a causal sequence, so they need causal=True, got "
                f"causal=False (with {'a state' if state is not None else 'return_state=True'})"
            )
        if state is None:
            return
        batch, heads, _, value_dim = *q.shape[:3], v.shape[3]
        expected = self.init_state(batch, heads, value_dim, device="meta", dtype=q.dtype)
        if isinstance(expected, OP_STATES):
            check_state_type(name, state, expected)  # its fields are checked once, by the op that consumes it
        else:
            check_state(name, state, expected, q.device, self.cache_entries)

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
