"""Plain O(N^2) helpers shared by the reference tests: explicit masks, softmax over visible keys."""

from __future__ import annotations

import torch


def softmax_over(logits: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """softmax over the True entries of ``visible`` (last dim); rows with none are all zeros."""
    weights = torch.exp(logits - logits.amax(-1, keepdim=True)) * visible
    total = weights.sum(-1, keepdim=True)
    return weights / torch.where(total > 0, total, torch.ones_like(total))


def key_mask(padding: torch.Tensor | None, batch: int, n: int, s: int, causal: bool) -> torch.Tensor:
    """Bool (B, 1, N, S): key j visible to query i (causal: j <= i; padded keys never)."""
    visible = torch.ones(batch, 1, n, s, dtype=torch.bool)
    if causal:
        visible &= torch.ones(n, s, dtype=torch.bool).tril()
    if padding is not None:
        visible &= ~padding[:, None, None, :]
    return visible


def compacted_outputs(run, q, k, v, padding):
    """Outputs at the unpadded positions of each sequence, computed on the sequence with the padded
    positions removed: the reference for attentions whose padded tokens are absent."""
    rows = []
    for b in range(q.shape[0]):
        keep = ~padding[b]
        out = run(q[b : b + 1, :, keep], k[b : b + 1, :, keep], v[b : b + 1, :, keep])  # (1, H, n_b, M)
        full = torch.zeros(1, *q.shape[1:3], v.shape[-1], dtype=out.dtype)
        full[:, :, keep] = out
        rows.append(full)
    return torch.cat(rows)
