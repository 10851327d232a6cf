"""Tokenizers: encode/decode round trips, errors naming what cannot be encoded, storage in checkpoints."""

from __future__ import annotations

import pytest

from lintf.data.tokenizers import (TOKENIZER_KEY, BPETokenizer, ByteTokenizer, CharTokenizer, tokenizer_from_checkpoint,
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


def test_byte_tokenizer_reads_any_text():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(TEXT)
    assert tokenizer.vocab_size == 256 and ids == list(TEXT.encode("utf-8")) and tokenizer.decode(ids) == TEXT
    assert tokenizer.decode(ids[:-3] + ids[-2:]) != TEXT  # a character cut short decodes to U+FFFD, not an error
    assert tokenizer_from_dict(tokenizer.to_dict()).encode("é") == [0xC3, 0xA9]


def test_bpe_is_deterministic_lossless_and_stored_as_json(tmp_path):
    text = TEXT * 50
    first, second = BPETokenizer.train(text, 300), BPETokenizer.train(text, 300)
    assert first.to_dict() == second.to_dict()  # the same text gives the same ids, run after run
    assert 256 < first.vocab_size <= 300
    ids = first.encode(TEXT)
    assert len(ids) < len(TEXT.encode("utf-8")) and first.decode(ids) == TEXT
    assert first.decode(first.encode("words it never saw: Ωμέγα")) == "words it never saw: Ωμέγα"
    stored = first.to_dict()
    assert set(stored) == {"kind", "json"} and isinstance(stored["json"], str)
    assert tokenizer_from_dict(stored).encode(TEXT) == ids
    first.tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert BPETokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(TEXT) == ids


def test_bpe_refuses_a_bad_size_or_file(tmp_path):
    with pytest.raises(ValueError, match="vocab_size of a bpe tokenizer must be > 256"):
        BPETokenizer.train(TEXT, 200)
    with pytest.raises(ValueError, match="does not exist: give the path of a Hugging Face tokenizer.json"):
        BPETokenizer.from_file(str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a Hugging Face tokenizer.json"):
        BPETokenizer.from_file(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="a stored bpe tokenizer needs the JSON"):
        tokenizer_from_dict({"kind": "bpe", "json": "[]"})
