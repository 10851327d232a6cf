"""Tokenizers of text models, stored with their checkpoints as plain data.

    base.py        the ``Tokenizer`` contract, ``TOKENIZER_KEY``, ``tokenizer_from_checkpoint``
    char.py        ``char``: one token per character of the text
    utf8_bytes.py  ``bytes``: one token per UTF-8 byte
    bpe.py         ``bpe``: byte-level BPE trained on the text, or any Hugging Face ``tokenizer.json``
"""

from lintf.data.tokenizers.base import (TOKENIZER_KEY, TOKENIZERS, Tokenizer, tokenizer_from_checkpoint,
                                        tokenizer_from_dict)
from lintf.data.tokenizers.bpe import BPETokenizer
from lintf.data.tokenizers.char import CharTokenizer
from lintf.data.tokenizers.utf8_bytes import ByteTokenizer

__all__ = ["TOKENIZER_KEY", "TOKENIZERS", "BPETokenizer", "ByteTokenizer", "CharTokenizer", "Tokenizer",
           "tokenizer_from_checkpoint", "tokenizer_from_dict"]
