"""The contract of a tokenizer (text <-> ids) and its storage in a checkpoint as plain data.

A tokenizer is stored with the checkpoint of the task it was trained with, under ``TOKENIZER_KEY``,
as a dict of strings and ints (``Tokenizer.to_dict``): checkpoints load with ``weights_only=True``,
so nothing in them is pickled and nothing runs code. ``tokenizer_from_checkpoint`` rebuilds it, so
text can be encoded and decoded without the training data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

TOKENIZER_KEY = "lintf_tokenizer"
"""The checkpoint entry that holds the tokenizer's ``to_dict()``."""

TOKENIZERS: dict[str, type[Tokenizer]] = {}
"""Every tokenizer class by the ``kind`` it is stored as; a subclass registers itself by being defined."""


class Tokenizer(ABC):
    """Text as token ids 0..vocab_size-1 and back.

    A subclass names its stored form with ``kind`` (``class CharTokenizer(Tokenizer, kind="char")``)
    and rebuilds itself from ``to_dict()`` with ``from_dict``.
    """

    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind
        TOKENIZERS[kind] = cls

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """The ids of ``text``; ValueError naming what it cannot encode."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""

    @abstractmethod
    def to_dict(self) -> dict[str, str | int]:
        """The tokenizer as plain data: ``{"kind": self.kind, ...}`` with strings and ints only."""

    @classmethod
    @abstractmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> Tokenizer:
        """The tokenizer that ``to_dict`` described; ValueError if ``stored`` is not such a description."""


def tokenizer_from_dict(stored: Any) -> Tokenizer:
    """The tokenizer ``Tokenizer.to_dict()`` stored; ValueError naming the known kinds for anything else.

    Args:
        stored: a dict with a ``kind`` key and that kind's fields.
    """
    kind = stored.get("kind") if isinstance(stored, Mapping) else None
    if kind not in TOKENIZERS:
        raise ValueError(f"a stored tokenizer must be a dict whose kind is one of {', '.join(sorted(TOKENIZERS))}; "
                         f"got {str(stored)[:200]!r}")
    return TOKENIZERS[kind].from_dict(stored)


def tokenizer_from_checkpoint(checkpoint: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer a checkpoint was trained with; ValueError if it holds none.

    Args:
        checkpoint: a checkpoint dict (as ``torch.load`` returns it).
    """
    if TOKENIZER_KEY not in checkpoint:
        raise ValueError(
            "this checkpoint holds no tokenizer: it was written by a task that reads no text, or by a lintf older "
            "than the one that stores the tokenizer with a text model's checkpoint. Train it again with this lintf "
            "(lintf fit --config configs/stream_lm.yaml ...), whose checkpoints carry their tokenizer."
        )
    return tokenizer_from_dict(checkpoint[TOKENIZER_KEY])
