"""Tokenizers of text models, stored with their checkpoints as plain data.

    base.py        the ``Tokenizer`` contract, ``TOKENIZER_KEY``, ``tokenizer_from_checkpoint``
    char.py        ``char``: one token per character of the text
"""

from lintf.data.tokenizers.base import (TOKENIZER_KEY, TOKENIZERS, Tokenizer, tokenizer_from_checkpoint,
                                        tokenizer_from_dict)
from lintf.data.tokenizers.char import CharTokenizer

__all__ = ["TOKENIZER_KEY", "TOKENIZERS", "CharTokenizer", "Tokenizer", "tokenizer_from_checkpoint",
           "tokenizer_from_dict"]
