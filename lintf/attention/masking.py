"""Which keys a query may see, and a softmax over only those (zeros where none is visible)."""

from __future__ import annotations

import torch
from torch import Tensor


def visible_keys(
    key_padding_mask: Tensor | None, causal: bool, n_queries: int, n_keys: int, device: torch.device
) -> Tensor | None:
    """Bool (B|1, 1, N, S) mask, True where query i may attend key j; None if every key is visible."""
    visible = None
    if causal:
        visible = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril()[None, None]
    if key_padding_mask is not None:
        not_padding = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        visible = not_padding if visible is None else visible & not_padding
    return visible


def masked_softmax(logits: Tensor, visible: Tensor | None, dim: int = -1) -> Tensor:
    """softmax(logits) over the visible entries of ``dim``; hidden entries and empty rows get 0.

    Hidden entries are filled with the dtype's most negative finite value rather than -inf, so a
    row with nothing visible gives finite values (and gradients) before it is zeroed.

    Args:
        logits: scores, any shape.
        visible: bool, broadcastable to ``logits``, True where an entry may be attended; None: all.
        dim: the dimension normalised over.

    Returns:
        weights shaped like ``logits`` that sum to 1 over ``dim`` (0 where nothing is visible).
    """
    if visible is None:
        return torch.softmax(logits, dim=dim)
    filled = logits.masked_fill(~visible, torch.finfo(logits.dtype).min)
    return torch.softmax(filled, dim=dim) * visible
