"""Own-text training at its edges: a text of one byte and a vocabulary no memory holds are refused before any
model or tokenizer is built, in one paragraph with exit status 2, leaving no run directory."""

from __future__ import annotations

import os

import pytest

from tests.cli.helpers import REPO, quiet_trainer
from tests.faults.test_cli_faults import lintf_error, no_run_directory

STREAM_LM = str(REPO / "configs" / "stream_lm.yaml")


def test_a_one_byte_text_gets_the_short_text_message(tmp_path, capsys):
    text = tmp_path / "one.txt"
    text.write_text("a")
    err = lintf_error(["fit", "--config", STREAM_LM, "--data.path", str(text), *quiet_trainer(tmp_path)], capsys)
    assert f"TextStreamData: {text} is too short: 1 characters" in err and "a text needs at least" in err
    assert "CategoricalHead" not in err and no_run_directory(tmp_path)


def test_one_repeated_character_is_named(tmp_path, capsys):
    text = tmp_path / "same.txt"
    text.write_text("a" * 20_000)
    err = lintf_error(["fit", "--config", STREAM_LM, "--data.path", str(text), *quiet_trainer(tmp_path)], capsys)
    assert f"TextStreamData: {text} has 1 distinct characters; a language model chooses among at least 2" in err
    assert "is short" not in err and no_run_directory(tmp_path)


@pytest.mark.skipif(not hasattr(os, "sysconf"), reason="needs the machine's memory size")
def test_a_vocabulary_beyond_memory_is_refused_before_the_tokenizer_trains(tmp_path, capsys, monkeypatch):
    import lintf.data.tokenizers as tokenizers

    text = tmp_path / "text.txt"
    text.write_text("the lord said unto moses. " * 800)
    trained = []
    monkeypatch.setattr(tokenizers.BPETokenizer, "train", classmethod(lambda cls, *args: trained.append(args)))
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    vocab_size = memory // (2 * 128 * 4) + 1  # one token more than float32 embedding + head of d_model 128 hold
    err = lintf_error(["fit", "--config", STREAM_LM, "--data.path", str(text), "--data.tokenizer", "bpe",
                       "--data.vocab_size", str(vocab_size), "--model.encoder.d_model", "128",
                       *quiet_trainer(tmp_path)], capsys)
    assert f"vocab_size {vocab_size} with d_model 128 needs" in err and "GiB of memory" in err
    assert trained == [] and no_run_directory(tmp_path)
