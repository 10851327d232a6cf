"""Vocal tract length perturbation (Jaitly & Hinton, 2013): warp the frequency axis of the filterbank.

A speaker with a shorter vocal tract has its formants at proportionally higher frequencies.
Training with the filterbank's frequencies scaled by a random factor alpha per utterance imitates
unseen speakers. The warp is piecewise linear: f -> alpha f up to a boundary, then a straight line
that maps the Nyquist frequency onto itself, so the warped axis still covers 0 .. f_max.
"""

from __future__ import annotations

from torch import Tensor


def warp_frequencies(hz: Tensor, alpha: float, f_max: float, boundary_hz: float = 4800.0) -> Tensor:
    """Frequencies ``hz`` (any shape, 0 .. f_max) warped by ``alpha``; alpha = 1 is the identity.

    Args:
        hz: frequencies in Hz.
        alpha: warp factor, typically 0.9 .. 1.1.
        f_max: the highest frequency (Nyquist), mapped to itself.
        boundary_hz: below ``boundary_hz * min(alpha, 1) / alpha`` frequencies are scaled by alpha.
    """
    if alpha <= 0:
        raise ValueError(f"VTLP warp factor must be > 0, got {alpha}")
    cut = boundary_hz * min(alpha, 1.0) / alpha
    if not 0 < cut < f_max:
        raise ValueError(f"VTLP boundary {cut:.0f} Hz must lie inside (0, {f_max:.0f}) Hz")
    above = f_max - (f_max - alpha * cut) * (f_max - hz) / (f_max - cut)
    return (hz * alpha).where(hz <= cut, above)
