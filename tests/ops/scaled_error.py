"""The error measure of the op's tests against a reference: max |got - want| / max(1, max |want|).

Element-wise relative bounds do not fit unnormalised sums: an entry near zero by cancellation carries
the rounding error of the sum's scale, so the error is measured against the tensor's scale.
"""

from __future__ import annotations

import torch


def scaled_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max(1, max |want|), in fp64 on the CPU; 0 for empty tensors."""
    got, want = got.double().cpu(), want.double().cpu()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item() if want.numel() else 0.0
