"""Byte-level BPE with the Hugging Face ``tokenizers`` library: trained on a text, or read from a ``tokenizer.json``.

Training is byte-level (GPT-2's pre-tokenizer and 256-byte base alphabet), so every text encodes and
decodes back exactly. The tokenizer is stored as its JSON text, which ``tokenizers`` reads as data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lintf.data.tokenizers.base import Tokenizer

BASE_ALPHABET = 256
"""Byte-level BPE starts from the 256 bytes; merges add the rest of the vocabulary."""


def huggingface_tokenizers() -> Any:
    """The ``tokenizers`` package; ValueError saying how to install it if it is missing."""
    try:
        import tokenizers
    except ImportError:
        raise ValueError("the bpe tokenizer needs the Hugging Face tokenizers package: "
                         "pip install tokenizers") from None
    return tokenizers


class BPETokenizer(Tokenizer, kind="bpe"):
    """A Hugging Face ``tokenizers.Tokenizer``: BPE trained by ``train``, or any ``tokenizer.json`` (``from_file``).

    Args:
        tokenizer: the ``tokenizers.Tokenizer`` that encodes and decodes.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Byte-level BPE with at most ``vocab_size`` tokens, learned from ``text`` (deterministic).

        Args:
            text: the training text.
            vocab_size: 256 bytes plus the merges to learn; fewer if the text has no more pairs to merge.
        """
        if vocab_size < BASE_ALPHABET + 1:
            raise ValueError(f"vocab_size of a bpe tokenizer must be > {BASE_ALPHABET} (its byte alphabet plus at "
                             f"least one merge), got {vocab_size}")
        hf = huggingface_tokenizers()
        tokenizer = hf.Tokenizer(hf.models.BPE())
        tokenizer.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                         initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator([text], trainer)
        return cls(tokenizer)

    @classmethod
    def from_file(cls, path: str) -> BPETokenizer:
        """The tokenizer of a Hugging Face ``tokenizer.json``; ValueError naming the file if it is not one."""
        hf = huggingface_tokenizers()
        if not Path(path).is_file():
            raise ValueError(f"tokenizer_file {path!r} does not exist: give the path of a Hugging Face tokenizer.json")
        try:
            return cls(hf.Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a plain Exception for a malformed file
            raise ValueError(f"tokenizer_file {path!r} is not a Hugging Face tokenizer.json ({error})") from None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def to_dict(self) -> dict[str, str | int]:
        return {"kind": self.kind, "json": self.tokenizer.to_str()}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> BPETokenizer:
        hf = huggingface_tokenizers()
        try:
            return cls(hf.Tokenizer.from_str(stored["json"]))
        except Exception as error:  # KeyError, TypeError, or tokenizers' plain Exception for bad JSON
            raise ValueError(f"a stored bpe tokenizer needs the JSON of a Hugging Face tokenizer ({error!r})") from None
