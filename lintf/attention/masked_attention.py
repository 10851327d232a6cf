"""Softmax attention over an arbitrary pattern of visible keys, without forming the weight matrix.

Attentions whose sparsity is a boolean pattern (routing's clusters, memory_compressed's blocks)
hand it to ``scaled_dot_product_attention``, whose fused kernels take a boolean mask and never
materialise the (N, S) logits in the backward either.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def attend_visible(q: Tensor, k: Tensor, v: Tensor, visible: Tensor, scale: float) -> Tensor:
    """softmax(scale * q k^T) v over the visible keys; zeros for a query that sees none.

    A query that sees no key attends to every key and its output is then multiplied by 0, so a
    NaN query still gives NaN (as in every attention) while a finite one gives exact zeros.

    Args:
        q: (..., N, D) queries.
        k: (..., S, D) keys.
        v: (..., S, M) values.
        visible: bool, broadcastable to (..., N, S): True where query i may attend key j.
        scale: logit scale.

    Returns:
        (..., N, M).
    """
    if k.shape[-2] == 0:  # no key at all: one hidden key of zeros, so every row takes the path below
        k, v, visible = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1)), F.pad(visible, (0, 1), value=False)
    sees_nothing = ~visible.any(-1, keepdim=True)  # (..., N, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible | sees_nothing, scale=scale)
    return out.where(~sees_nothing, out * 0)
