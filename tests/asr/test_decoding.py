"""Greedy decoding and prefix beam search against brute-force enumeration of every CTC path."""

import math

import pytest
import torch

from lintf.asr.decoding.ctc import beam_decode, collapse_path, greedy_decode, prefix_beam_search
from tests.asr.ctc_brute_force import label_sequence_probabilities


def brute_force_best(log_probs: torch.Tensor) -> tuple[tuple[int, ...], float]:
    """The label sequence with the largest total probability, summing all V**T paths."""
    totals = label_sequence_probabilities(log_probs)
    best = max(totals, key=totals.get)
    return best, totals[best]


def test_collapse_path():
    assert collapse_path([0, 1, 1, 0, 1, 2, 2, 0]) == (1, 1, 2)
    assert collapse_path([0, 0]) == ()


def test_greedy_respects_lengths():
    scores = torch.full((2, 5, 3), -5.0)
    for t, v in enumerate([1, 1, 0, 1, 2]):
        scores[:, t, v] = 0.0
    assert greedy_decode(scores, torch.tensor([5, 2])) == [[1, 1, 2], [1]]


@pytest.mark.parametrize("seed", range(6))
def test_beam_search_finds_the_most_probable_labels(seed):
    generator = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(torch.randn(5, 3, generator=generator) * 1.5, dim=-1)
    best, _ = brute_force_best(log_probs)
    assert tuple(prefix_beam_search(log_probs, beam_width=50, prune=-math.inf)) == best


def test_beam_can_beat_greedy():
    # best path is blank-blank (empty, p=0.36) but "1" has total 0.64 over its three paths
    probs = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    log_probs = probs.log()
    assert greedy_decode(log_probs[None], torch.tensor([2])) == [[]]
    assert prefix_beam_search(log_probs, beam_width=4) == [1]


def test_beam_decode_batch_and_errors():
    log_probs = torch.log_softmax(torch.randn(2, 4, 3), dim=-1)
    out = beam_decode(log_probs, torch.tensor([4, 2]), beam_width=3)
    assert out[1] == prefix_beam_search(log_probs[1, :2], 3)
    with pytest.raises(ValueError, match="beam_width"):
        prefix_beam_search(log_probs[0], beam_width=0)
