"""CTC decoding: greedy (best path) and prefix beam search (best label sequence, approximately)."""

from __future__ import annotations

import math
from collections import defaultdict

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


def _logsumexp(*values: float) -> float:
    top = max(values)
    return top if top == NEG_INF else top + math.log(sum(math.exp(v - top) for v in values))


def prefix_beam_search(log_probs: Tensor, beam_width: int = 8, blank: int = 0, prune: float = -12.0) -> list[int]:
    """The most probable label sequence of one utterance under CTC, by prefix beam search.

    Every prefix keeps two scores: paths ending in blank and paths ending in its last label, so
    "a a" (two labels) and "aa" (one) are told apart; a prefix's score sums all of its paths.

    Args:
        log_probs: (T, V) log-probabilities of one utterance's valid frames.
        beam_width: prefixes kept after each frame.
        blank: the blank label id.
        prune: labels whose frame log-probability is below this are not extended (speed).
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
                if prefix and prefix[-1] == v:  # a repeat needs a blank in between to count twice
                    extended[1] = _logsumexp(extended[1], p_blank + p)
                    same = next_beams[prefix]
                    same[1] = _logsumexp(same[1], p_label + p)
                else:
                    extended[1] = _logsumexp(extended[1], total + p)
        ranked = sorted(next_beams.items(), key=lambda item: _logsumexp(*item[1]), reverse=True)
        beams = {prefix: (scores[0], scores[1]) for prefix, scores in ranked[:beam_width]}
    return list(max(beams.items(), key=lambda item: _logsumexp(*item[1]))[0])


def beam_decode(log_probs: Tensor, lengths: Tensor, beam_width: int = 8, blank: int = 0) -> list[list[int]]:
    """``prefix_beam_search`` over a batch: log_probs (B, T, V), lengths (B,)."""
    return [prefix_beam_search(lp[:n], beam_width, blank) for lp, n in zip(log_probs, lengths.tolist())]


def collapse_path(path: list[int], blank: int = 0) -> tuple[int, ...]:
    """The label sequence of one CTC path (repeats merged, blanks dropped)."""
    out, previous = [], blank
    for label in path:
        if label != blank and label != previous:
            out.append(label)
        previous = label
    return tuple(out)
