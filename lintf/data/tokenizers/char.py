"""Characters as tokens: the distinct characters of a text, sorted, are the ids 0..V-1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lintf.data.tokenizers.base import Tokenizer

MAX_SHOWN = 20
"""Unknown characters named in an error at most."""


class CharTokenizer(Tokenizer, kind="char"):
    """One token per character; the vocabulary is sorted, so the ids do not depend on the order of the text.

    Args:
        characters: every character a text may hold (repeats and order do not matter).
    """

    def __init__(self, characters: str) -> None:
        self.characters = "".join(sorted(set(characters)))
        self.index = {c: i for i, c in enumerate(self.characters)}

    @property
    def vocab_size(self) -> int:
        return len(self.characters)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[c] for c in text]
        except KeyError:
            unknown = sorted(set(text) - set(self.index))
            shown = "".join(unknown[:MAX_SHOWN]) + ("..." if len(unknown) > MAX_SHOWN else "")
            raise ValueError(f"the characters {shown!r} ({len(unknown)} distinct) are not in this character "
                             f"tokenizer's vocabulary of {self.vocab_size}: {self.characters[:200]!r}") from None

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.characters[i] for i in ids)

    def to_dict(self) -> dict[str, str | int]:
        return {"kind": self.kind, "characters": self.characters}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> CharTokenizer:
        characters = stored.get("characters")
        if not isinstance(characters, str) or not characters:
            raise ValueError(f"a stored char tokenizer needs its characters as a non-empty string, got {characters!r}")
        return cls(characters)
