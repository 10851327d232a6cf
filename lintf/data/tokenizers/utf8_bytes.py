"""UTF-8 bytes as tokens: 256 ids, any text, no vocabulary to learn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lintf.data.tokenizers.base import Tokenizer


class ByteTokenizer(Tokenizer, kind="bytes"):
    """One token per byte of the text's UTF-8 encoding; decoding replaces a character cut short with U+FFFD."""

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        try:
            return bytes(ids).decode("utf-8", errors="replace")
        except ValueError:
            raise ValueError(f"byte tokens are 0..255, got {[i for i in ids if not 0 <= i < 256][:10]}") from None

    def to_dict(self) -> dict[str, str | int]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> ByteTokenizer:
        return cls()
