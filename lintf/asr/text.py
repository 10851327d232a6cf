"""Transcript normalisation and the character vocabulary of CTC targets (index 0 is the blank)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_KEEP = re.compile(r"[^a-z0-9' ]+")
_KEEP_ACCENTED = re.compile(r"[^\w' ]+|_")


def normalize_text(text: str, keep_accents: bool = False) -> str:
    """Lower-case letters, digits, apostrophes and single spaces; other characters become spaces.

    Args:
        text: a transcript.
        keep_accents: keep non-ASCII letters (Czech ``ř``); by default accents are stripped
            (``é`` -> ``e``) so English transcripts from different sources share one alphabet.
    """
    text = unicodedata.normalize("NFC", text.replace("\u2019", "'")).lower()
    if keep_accents:
        return " ".join(_KEEP_ACCENTED.sub(" ", text).split())
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(_KEEP.sub(" ", ascii_text).split())


class CharVocabulary:
    """Characters <-> CTC label ids; id 0 is the blank, characters are 1..len(characters).

    Args:
        characters: the alphabet, each character once.
    """

    BLANK = 0

    def __init__(self, characters: str) -> None:
        if len(set(characters)) != len(characters) or not characters:
            raise ValueError(f"vocabulary characters must be non-empty and distinct, got {characters!r}")
        self.characters = characters
        self._ids = {c: i + 1 for i, c in enumerate(characters)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharVocabulary:
        """The sorted set of characters in ``texts``."""
        return cls("".join(sorted(set("".join(texts)))))

    def __len__(self) -> int:
        """Number of label ids including the blank."""
        return len(self.characters) + 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharVocabulary) and other.characters == self.characters

    def unknown(self, text: str) -> list[str]:
        """Characters of ``text`` outside the vocabulary, sorted."""
        return sorted(set(text) - set(self._ids))

    def encode(self, text: str) -> list[int]:
        """Label ids of ``text``; KeyError naming the characters outside the vocabulary."""
        missing = self.unknown(text)
        if missing:
            raise KeyError(f"characters {missing} of {text!r} are not in the vocabulary {self.characters!r}")
        return [self._ids[c] for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of label ids (blanks skipped; no CTC collapsing)."""
        return "".join(self.characters[i - 1] for i in ids if i != self.BLANK)
