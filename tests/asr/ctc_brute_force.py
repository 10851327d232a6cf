"""Reference for CTC decoding tests: the probability of every label sequence, by enumerating all V**T paths."""

import itertools
import math
from collections import defaultdict

import torch

from lintf.asr.decoding.ctc import collapse_path


def label_sequence_probabilities(log_probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """P(label sequence) for every sequence some path of ``log_probs`` (T, V) collapses to."""
    frames, vocab = log_probs.shape
    totals: dict[tuple[int, ...], float] = defaultdict(float)
    for path in itertools.product(range(vocab), repeat=frames):
        totals[collapse_path(list(path))] += math.exp(sum(float(log_probs[t, v]) for t, v in enumerate(path)))
    return totals
