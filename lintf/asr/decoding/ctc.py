"""CTC decoding: greedy (best path) and prefix beam search (best label sequence, approximately),
optionally fused with a language model (shallow fusion, Hannun et al. 2014)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Protocol

from torch import Tensor

NEG_INF = -math.inf


def greedy_decode(log_probs: Tensor, lengths: Tensor, blank: int = 0) -> list[list[int]]:
    """Best path per utterance: argmax per frame, repeats merged, blanks dropped.

    Args:
        log_probs: (B, T, V) frame scores (log-probabilities or logits).
        lengths: (B,) valid frames per utterance.
        blank: the blank label id.
    """
    best = log_probs.argmax(dim=-1).cpu()  # (B, T)
    return [list(collapse_path(row[:length], blank)) for row, length in zip(best.tolist(), lengths.tolist())]


class PrefixScorer(Protocol):
    """Extra log-scores a beam search adds to label sequences, e.g. a weighted language model."""

    def extend(self, prefix: tuple[int, ...], label: int) -> float:
        """Score added when ``label`` is appended to ``prefix``."""

    def finish(self, prefix: tuple[int, ...]) -> float:
        """Score added to a complete label sequence (e.g. the end-of-sentence probability)."""


def _logsumexp(*values: float) -> float:
    top = max(values)
    return top if top == NEG_INF else top + math.log(sum(math.exp(v - top) for v in values))


def prefix_beam_search(log_probs: Tensor, beam_width: int = 8, blank: int = 0, prune: float = -12.0,
                       scorer: PrefixScorer | None = None) -> list[int]:
    """The most probable label sequence of one utterance under CTC, by prefix beam search.

    Every prefix keeps two scores: paths ending in blank and paths ending in its last label, so
    "a a" (two labels) and "aa" (one) are told apart; a prefix's score sums all of its paths.
    With a ``scorer``, a sequence's score is its CTC log-probability plus the scorer's terms.

    Args:
        log_probs: (T, V) log-probabilities of one utterance's valid frames.
        beam_width: prefixes kept after each frame.
        blank: the blank label id.
        prune: labels whose frame log-probability is below this are not extended (speed).
        scorer: extra scores of label sequences (a language model); None uses CTC alone.
    """
    if beam_width < 1:
        raise ValueError(f"beam_width must be >= 1, got {beam_width}")
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}  # prefix -> (blank, non-blank)
    for frame in log_probs.double().cpu().tolist():
        candidates = [v for v, p in enumerate(frame) if p >= prune] or [max(range(len(frame)), key=frame.__getitem__)]
        next_beams: dict[tuple[int, ...], list[float]] = defaultdict(lambda: [NEG_INF, NEG_INF])
        for prefix, (p_blank, p_label) in beams.items():
            total = _logsumexp(p_blank, p_label)
            for v in candidates:
                p = frame[v]
                if v == blank:
                    entry = next_beams[prefix]
                    entry[0] = _logsumexp(entry[0], total + p)
                    continue
                extended = next_beams[prefix + (v,)]
                extra = scorer.extend(prefix, v) if scorer is not None else 0.0
                if prefix and prefix[-1] == v:  # a repeat needs a blank in between to count twice
                    extended[1] = _logsumexp(extended[1], p_blank + p + extra)
                    same = next_beams[prefix]
                    same[1] = _logsumexp(same[1], p_label + p)
                else:
                    extended[1] = _logsumexp(extended[1], total + p + extra)
        ranked = sorted(next_beams.items(), key=lambda item: _logsumexp(*item[1]), reverse=True)
        beams = {prefix: (scores[0], scores[1]) for prefix, scores in ranked[:beam_width]}
    finish = scorer.finish if scorer is not None else lambda prefix: 0.0
    return list(max(beams.items(), key=lambda item: _logsumexp(*item[1]) + finish(item[0]))[0])


def beam_decode(log_probs: Tensor, lengths: Tensor, beam_width: int = 8, blank: int = 0,
                scorer: PrefixScorer | None = None) -> list[list[int]]:
    """``prefix_beam_search`` over a batch: log_probs (B, T, V), lengths (B,)."""
    return [prefix_beam_search(lp[:n], beam_width, blank, scorer=scorer) for lp, n in zip(log_probs, lengths.tolist())]


def collapse_path(path: list[int], blank: int = 0) -> tuple[int, ...]:
    """The label sequence of one CTC path (repeats merged, blanks dropped)."""
    out, previous = [], blank
    for label in path:
        if label != blank and label != previous:
            out.append(label)
        previous = label
    return tuple(out)
