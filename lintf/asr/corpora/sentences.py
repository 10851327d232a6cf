"""Short sentences for speech synthesis, cut from the King James Bible at clause boundaries, and the
text of a language model for them that leaves out the evaluation sentences."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from pathlib import Path

from lintf.asr.text import normalize_text

_CLAUSE = re.compile(r"[.;:?!]")


def clauses(path: Path, min_words: int, max_words: int) -> list[str]:
    """Distinct normalised clauses of ``min_words``..``max_words`` words, in text order."""
    seen, out = set(), []
    with open(path, encoding="utf-8") as file:
        for line in file:
            for piece in _CLAUSE.split(json.loads(line)["text"]):
                text = normalize_text(piece)
                if min_words <= len(text.split()) <= max_words and not any(c.isdigit() for c in text) and text not in seen:
                    seen.add(text)
                    out.append(text)
    return out


def language_model_text(path: Path, held_out: Iterable[str]) -> list[str]:
    """Every normalised clause of the text (without digits) except those of verses a ``held_out`` sentence comes from.

    The text of a character language model for a corpus cut by ``clauses``: it holds the training
    sentences and the rest of the book, but neither the evaluation sentences nor the verses around them.
    """
    held_out, out = set(held_out), []
    with open(path, encoding="utf-8") as file:
        for line in file:
            pieces = [normalize_text(piece) for piece in _CLAUSE.split(json.loads(line)["text"])]
            if not held_out.intersection(pieces):
                out += [text for text in pieces if text and not any(c.isdigit() for c in text)]
    return out


def split_sentences(sentences: list[str], counts: dict[str, int], seed: int) -> dict[str, list[str]]:
    """Disjoint random draws of ``counts[split]`` sentences per split (ValueError if too few)."""
    needed = sum(counts.values())
    if needed > len(sentences):
        raise ValueError(f"asked for {needed} distinct sentences ({counts}) but the text has {len(sentences)}")
    drawn = random.Random(seed).sample(sentences, needed)
    out, start = {}, 0
    for split, count in counts.items():
        out[split], start = drawn[start : start + count], start + count
    return out
