"""Tokenizers: encode/decode round trips, errors naming what cannot be encoded, storage in checkpoints."""

from __future__ import annotations

import pytest

from lintf.data.tokenizers import (TOKENIZER_KEY, CharTokenizer, tokenizer_from_checkpoint,
                                   tokenizer_from_dict)

TEXT = "In the beginning God created the heaven and the earth.\nÆsop's fables, 日本語 too.\n"


def test_char_tokenizer_sorts_its_characters_and_round_trips():
    tokenizer = CharTokenizer("cabca")
    assert tokenizer.characters == "abc" and tokenizer.vocab_size == 3
    assert tokenizer.encode("abcab") == [0, 1, 2, 0, 1]
    whole = CharTokenizer(TEXT)
    assert whole.decode(whole.encode(TEXT)) == TEXT and whole.vocab_size == len(set(TEXT))


def test_char_tokenizer_names_the_characters_it_lacks():
    with pytest.raises(ValueError, match=r"the characters 'dé' \(2 distinct\) are not in this character tokenizer"):
        CharTokenizer("abc").encode("abédd")


def test_a_tokenizer_survives_its_checkpoint_form():
    tokenizer = CharTokenizer(TEXT)
    stored = tokenizer.to_dict()
    assert all(isinstance(value, str | int) for value in stored.values())
    restored = tokenizer_from_checkpoint({TOKENIZER_KEY: stored})
    assert type(restored) is CharTokenizer and restored.encode(TEXT) == tokenizer.encode(TEXT)


def test_a_checkpoint_without_a_tokenizer_or_with_a_bad_one_is_refused():
    with pytest.raises(ValueError, match="this checkpoint holds no tokenizer"):
        tokenizer_from_checkpoint({"state_dict": {}})
    with pytest.raises(ValueError, match="kind is one of .*char"):
        tokenizer_from_dict({"kind": "wordpiece"})
    with pytest.raises(ValueError, match="needs its characters"):
        tokenizer_from_dict({"kind": "char", "characters": 3})
