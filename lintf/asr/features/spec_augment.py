"""SpecAugment (Park et al. 2019) without time warping: random frequency and time masks."""

from __future__ import annotations

import torch
from torch import Tensor


def spec_augment(
    features: Tensor,
    freq_masks: int,
    freq_width: int,
    time_masks: int,
    time_width: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """A copy of ``features`` (frames, n_mels) with masked bands set to 0 (the normalised mean).

    Args:
        features: one normalised utterance.
        freq_masks: frequency bands to mask.
        freq_width: widest frequency band, in mel bins (each width is uniform in 0..freq_width).
        time_masks: time spans to mask.
        time_width: widest span in frames; at most a fifth of the utterance.
        generator: random source (None uses torch's global one).
    """
    out = features.clone()
    frames, bins = out.shape
    spans = [(freq_masks, freq_width, bins, 1), (time_masks, min(time_width, frames // 5), frames, 0)]
    for count, width, size, dim in spans:
        for _ in range(count):
            w = int(torch.randint(0, width + 1, (), generator=generator)) if width > 0 else 0
            if w == 0 or w >= size:
                continue
            start = int(torch.randint(0, size - w + 1, (), generator=generator))
            out.narrow(dim, start, w).zero_()
    return out
