"""Element-wise decayed prefix sums h_i = exp(log_decay_i) h_{i-1} + x_i: AFT's running softmax.

The element-wise relative of the decayed causal product (``product.py``), in pure PyTorch;
``reference.py`` holds the position-by-position form the tests compare against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.ops.common.arguments import check_range
from lintf.ops.common.dtypes import accumulation_dtype


def decayed_cumsum(x: Tensor, log_decay: Tensor, *, check_ranges: bool = True) -> Tensor:
    """Element-wise decayed prefix sum h_i = exp(log_decay_i) h_{i-1} + x_i along dim 2.

    A log-step scan (Hillis-Steele): after the step with offset d, h_i sums x over the 2d
    positions ending at i, and the running decay product covers the same span, so the result
    takes ceil(log2 N) element-wise steps, every factor a product of decays <= 1. Differentiable
    by autograd; runs in the accumulation dtype with autocast off.

    Args:
        x: (B, H, N, ...) float terms.
        log_decay: log-decays <= 0 (``check_range``: on a GPU a device-side assertion), broadcastable to ``x`` with its own N in
            dim 2.
        check_ranges: check that log_decay <= 0; False where the caller builds it in range.

    Returns:
        (B, H, N, ...) prefix sums in the dtype of x.
    """
    if x.dim() < 3 or not x.is_floating_point() or log_decay.dim() != x.dim() or log_decay.shape[2] != x.shape[2]:
        raise ValueError(
            f"decayed cumsum: expected x (B, H, N, ...) and log_decay with as many dims and the same N, got "
            f"x {tuple(x.shape)}, log_decay {tuple(log_decay.shape)}"
        )
    if any(d not in (1, n) for d, n in zip(log_decay.shape, x.shape)):
        raise ValueError(f"decayed cumsum: log_decay {tuple(log_decay.shape)} must broadcast to x {tuple(x.shape)}")
    if check_ranges:
        check_range("decayed cumsum", "log_decay", log_decay, None, 0.0, "<= 0 (decays in (0, 1])")
    acc = accumulation_dtype(x.dtype)
    with torch.autocast(x.device.type, enabled=False):
        sums, decay = x.to(acc), torch.exp(log_decay.to(acc))
        offset = 0 if x.shape[2] == 0 else 1
        while 0 < offset < x.shape[2]:
            before = (0, 0) * (x.dim() - 3) + (offset, 0)  # pad dim 2 at the front
            sums = sums + decay * F.pad(sums[:, :, :-offset], before)  # h_{i-d} is 0 before the start
            decay = decay * F.pad(decay[:, :, :-offset], before)
            offset *= 2
    return sums.to(x.dtype)
