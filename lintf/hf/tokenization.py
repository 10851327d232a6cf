"""A lintf tokenizer in a Hugging Face directory: ``tokenizer.json`` for BPE, ``LintfTokenizer`` for char and bytes.

A BPE tokenizer is a Hugging Face ``tokenizers`` model already, so it is written as the standard
``tokenizer.json`` that any reader loads. The char and bytes tokenizers are written as lintf's own
stored form (``lintf_tokenizer.json``: the kind and, for char, the characters), which
``LintfTokenizer`` reads as data and ``import lintf`` registers with ``AutoTokenizer``.

``lintf.data`` is imported where it is used, not with this module: it imports Lightning, whose own
import may be what imports ``transformers`` and so registers this class (``lintf.hf.registration``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedTokenizerBase
from transformers.tokenization_python import PythonBackend
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from lintf.hf.settings import LINTF_TOKENIZER_FILE

if TYPE_CHECKING:
    from lintf.data.tokenizers import Tokenizer


class LintfTokenizer(PythonBackend):
    """lintf's char or bytes tokenizer behind ``transformers``' tokenizer API.

    Tokens are the characters (char) or ``<0xNN>`` for byte NN (bytes); text is encoded and decoded by
    lintf's tokenizer itself, so ids equal lintf's.

    Args:
        vocab_file: a ``lintf_tokenizer.json`` (lintf's ``Tokenizer.to_dict()``).
    """

    vocab_files_names = {"vocab_file": LINTF_TOKENIZER_FILE}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file: str, **kwargs: Any) -> None:
        from lintf.data.tokenizers import tokenizer_from_dict

        with open(vocab_file, encoding="utf-8") as stored:
            self.lintf_tokenizer = tokenizer_from_dict(json.load(stored))
        self.vocab_file = vocab_file
        self.tokens = [self._token_of(index) for index in range(self.lintf_tokenizer.vocab_size)]
        self.index = {token: index for index, token in enumerate(self.tokens)}
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(**kwargs)

    def _token_of(self, index: int) -> str:
        from lintf.data.tokenizers import ByteTokenizer

        if isinstance(self.lintf_tokenizer, ByteTokenizer):
            return f"<0x{index:02X}>"
        return self.lintf_tokenizer.decode([index])

    @property
    def vocab_size(self) -> int:
        return self.lintf_tokenizer.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return {**self.index, **self.added_tokens_encoder}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.tokens[index] for index in self.lintf_tokenizer.encode(text)]

    def _convert_token_to_id(self, token: str) -> int:
        return self.index[token]

    def _convert_id_to_token(self, index: int) -> str:
        return self.tokens[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self.lintf_tokenizer.decode([self.index[token] for token in tokens if token in self.index])

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        path = os.path.join(save_directory, (f"{filename_prefix}-" if filename_prefix else "") + LINTF_TOKENIZER_FILE)
        with open(path, "w", encoding="utf-8") as stored:
            json.dump(self.lintf_tokenizer.to_dict(), stored, ensure_ascii=False)
        return (path,)


def huggingface_tokenizer(tokenizer: Tokenizer, directory: str) -> PreTrainedTokenizerBase:
    """``tokenizer`` as a ``transformers`` tokenizer; char and bytes tokenizers are first written to ``directory``.

    Args:
        tokenizer: a lintf tokenizer.
        directory: where a ``lintf_tokenizer.json`` is written for ``LintfTokenizer`` to read.
    """
    from lintf.data.tokenizers import BPETokenizer

    if isinstance(tokenizer, BPETokenizer):
        return TokenizersBackend(tokenizer_object=tokenizer.tokenizer, clean_up_tokenization_spaces=False)
    path = os.path.join(directory, LINTF_TOKENIZER_FILE)
    with open(path, "w", encoding="utf-8") as stored:
        json.dump(tokenizer.to_dict(), stored, ensure_ascii=False)
    return LintfTokenizer(path)


def save_tokenizer(tokenizer: Tokenizer, directory: str) -> None:
    """Write ``tokenizer`` into ``directory`` as ``AutoTokenizer.from_pretrained`` reads it."""
    huggingface_tokenizer(tokenizer, directory).save_pretrained(directory)

