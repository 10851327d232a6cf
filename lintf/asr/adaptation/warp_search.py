"""Test-time vocal tract length normalisation (VTLN): one filterbank warp per speaker, chosen without transcripts.

A new speaker whose formants sit lower or higher than the training voices' is recognised better when
the frequency axis of its filterbank is warped toward them (``SpeechData(test_warp=...)``; the warp is
``lintf.asr.features.frequency_warp.warp_frequencies``, the one training augmentation draws from). As in classic VTLN
(Lee & Rose, 1996), the speaker's factor is picked from a grid by the model's own score, here the
best CTC path's mean log-probability per frame over all of the speaker's utterances: no transcript is
needed, so it can be chosen on the test speaker's audio.
"""

from __future__ import annotations

import torch
from torch import Tensor


def best_path_log_prob(log_probs: Tensor, lengths: Tensor) -> Tensor:
    """Mean over the valid frames of each frame's highest label log-probability.

    Args:
        log_probs: (B, T, V) per-frame label log-probabilities, padded after ``lengths``.
        lengths: (B,) valid frames of each utterance.

    Returns:
        (B,) the best path's log-probability per frame of each utterance.
    """
    valid = torch.arange(log_probs.shape[1], device=log_probs.device)[None, :] < lengths[:, None]  # (B, T)
    best = log_probs.max(dim=-1).values.masked_fill(~valid, 0.0)  # (B, T)
    return best.sum(dim=1) / lengths.clamp(min=1)


def choose_warp(scores: dict[float, float]) -> float:
    """The warp of the highest score (mean best-path log-probability); the one nearest 1 on a tie."""
    if not scores:
        raise ValueError("choose_warp needs the score of at least one warp")
    return max(scores, key=lambda warp: (scores[warp], -abs(warp - 1.0)))
