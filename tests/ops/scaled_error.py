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


def assert_all_close(names: list[str], got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    """Each named tensor of got has want's shape, is finite, and is within tolerance of it (scaled_error)."""
    for name, g, w in zip(names, got, want, strict=True):
        assert g.shape == w.shape, f"{name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert torch.isfinite(g).all(), f"{name}: not finite"
        error = scaled_error(g, w)
        assert error <= tolerance, f"{name}: error {error:.2e} > {tolerance:.0e}"
