"""How long a text stream's training segments and evaluation contexts are: the configured lengths, fitted to the text.

The training part is read as ``streams`` rows in segments of ``segment_length`` + 1 tokens; the
validation and the test part in contexts of ``eval_length`` + 1 tokens. A text too short for the
configured lengths gets the longest ones it can fill, down to ``MIN_LENGTH`` tokens; a text too
short even for those is refused with the size it needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

MIN_LENGTH = 16
"""Tokens per segment or context below which lengths are not reduced (a shorter configured length stays)."""
PARTS = ("train", "val", "test")


def split_points(size: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    """Where the validation and the test part of a text of ``size`` characters (or tokens) start.

    Args:
        size: length of the whole text.
        val_fraction: share of the text validated on, after the training part.
        test_fraction: share of the text tested on, at its end.
    """
    return int(size * (1 - val_fraction - test_fraction)), int(size * (1 - test_fraction))


@dataclass(frozen=True)
class StreamLengths:
    """Tokens per training segment and per evaluation context, and how many streams training reads.

    Args:
        segment_length: tokens predicted per training batch and stream.
        eval_length: tokens predicted per validation / test context.
        streams: training streams over all processes.
    """

    segment_length: int
    eval_length: int
    streams: int

    def floor(self) -> StreamLengths:
        """The shortest lengths a text may reduce these to."""
        return replace(self, segment_length=min(self.segment_length, MIN_LENGTH),
                       eval_length=min(self.eval_length, MIN_LENGTH))

    def fitted(self, tokens: Mapping[str, int]) -> StreamLengths:
        """The longest lengths, up to these and down to ``floor()``, that parts of ``tokens`` tokens can fill.

        Args:
            tokens: tokens of the train, val and test parts.
        """
        floor = self.floor()
        segment = min(self.segment_length, max(tokens["train"] // self.streams - 1, floor.segment_length))
        context = min(self.eval_length, max(min(tokens["val"], tokens["test"]) - 1, floor.eval_length))
        return replace(self, segment_length=segment, eval_length=context)

    def reductions(self, fitted: StreamLengths) -> list[str]:
        """``name configured -> fitted`` for each length ``fitted`` reduced."""
        pairs = (("segment_length", self.segment_length, fitted.segment_length),
                 ("eval_length", self.eval_length, fitted.eval_length))
        return [f"{name} {mine} -> {theirs}" for name, mine, theirs in pairs if theirs != mine]

    def shortfalls(self, tokens: Mapping[str, int], parts: tuple[str, ...], unit: str) -> list[str]:
        """What each of ``parts`` lacks for these lengths; empty if each can be read.

        Args:
            tokens: tokens of the train, val and test parts.
            parts: the parts to check.
            unit: what a token is, for the message ("characters", "tokens").
        """
        problems = []
        share = tokens["train"] // self.streams
        if "train" in parts and share < self.segment_length + 1:
            problems.append(f"its training part ({tokens['train']} {unit}) gives each of the {self.streams} streams "
                            f"{share}, fewer than one segment of {self.segment_length} + 1")
        problems += [f"its {part} part ({tokens[part]} {unit}) is shorter than one context of {self.eval_length} + 1"
                     for part in ("val", "test") if part in parts and tokens[part] < self.eval_length + 1]
        return problems

    def minimum(self, val_fraction: float, test_fraction: float) -> int:
        """The fewest tokens whose parts give every stream one segment and val and test one context each.

        Args:
            val_fraction: share of the text validated on.
            test_fraction: share of the text tested on.
        """
        # Rounding gives val and test up to one token more than their fraction, never the training part.
        bounds = (self.streams * (self.segment_length + 1) / (1 - val_fraction - test_fraction),
                  *(self.eval_length / fraction for fraction in (val_fraction, test_fraction)))
        size = max(1, max(math.floor(bound) for bound in bounds) - 1)
        while True:  # from below the shortest text up to it
            val_start, test_start = split_points(size, val_fraction, test_fraction)
            tokens = {"train": val_start, "val": test_start - val_start, "test": size - test_start}
            if not self.shortfalls(tokens, PARTS, "tokens"):
                return size
            size += 1
