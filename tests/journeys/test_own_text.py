"""Training on one's own text with configs/stream_lm.yaml as it is: the real ``lintf`` command in a temporary directory.

Only the model is shrunk (seconds per run); every data and trainer setting is the config's, so lengths and
the validation interval meet a 20 KB text as a user's would.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from lintf.data.tokenizers import BPETokenizer, tokenizer_from_checkpoint
from lintf.run.cli import main

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "stream_lm.yaml")
TINY = ["--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
        "--model.init_args.encoder.n_heads", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false"]
WORDS = "in the beginning was the word and with god all things were made by him light shineth darkness".split()


def write_text(path: Path, size: int) -> Path:
    """About ``size`` bytes of sentences."""
    rng, lines, written = random.Random(0), [], 0
    while written < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + ".\n"
        lines.append(line)
        written += len(line)
    path.write_text("".join(lines), encoding="utf-8")
    return path


def lintf(*args: str) -> int:
    """``lintf ARGS`` in this process: its exit status."""
    try:
        main(list(args))
    except SystemExit as exit_:
        return int(exit_.code)
    return 0


def last_checkpoint(root: Path) -> dict:
    (path,) = sorted(root.rglob("last.ckpt"))[-1:]
    return torch.load(path, weights_only=True)


def test_own_text_trains_predicts_and_resumes_with_the_config_as_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_text(tmp_path / "my.txt", 20_480)
    assert lintf("fit", "--config", CONFIG, "--data.path", "my.txt", *TINY, "--trainer.max_steps", "6") == 0
    err = capsys.readouterr().err
    notices = [line for line in err.splitlines() if line.startswith("lintf: my.txt")
               or line.startswith("lintf: an epoch of my.txt")]
    assert len(notices) == 2, err  # one line each, no error
    assert "eval_length 8192 -> " in notices[0] and "validating every 500 steps, counted across epochs" in notices[1]
    tokenizer = tokenizer_from_checkpoint(last_checkpoint(tmp_path))
    text = (tmp_path / "my.txt").read_text()
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert lintf("predict", "--config", CONFIG, "--data.path", "my.txt", *TINY, "--ckpt_path", "last") == 0
    (predictions,) = tmp_path.rglob("predictions.jsonl")
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert rows and {"start", "tokens", "characters", "bits_per_token", "bits_per_char"} <= set(rows[0])
    assert all(0 < row["bits_per_char"] < 10 for row in rows)
    assert lintf("fit", "--config", CONFIG, "--data.path", "my.txt", *TINY, "--trainer.max_steps", "8",
                 "--ckpt_path", "last") == 0
    assert last_checkpoint(tmp_path)["global_step"] == 8


def test_bpe_is_trained_once_stored_and_reused_by_resume_and_predict(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_text(tmp_path / "my.txt", 20_480)
    bpe = ["--data.path", "my.txt", "--data.tokenizer", "bpe", "--data.vocab_size", "512"]
    assert lintf("fit", "--config", CONFIG, *bpe, *TINY, "--trainer.max_steps", "3") == 0
    stored = tokenizer_from_checkpoint(last_checkpoint(tmp_path))
    assert isinstance(stored, BPETokenizer) and 256 < stored.vocab_size <= 512

    def retrain(*args, **kwargs):
        raise AssertionError("a run from a checkpoint trained a new tokenizer")

    monkeypatch.setattr(BPETokenizer, "train", retrain)
    (tmp_path / "my.txt").write_text((tmp_path / "my.txt").read_text().upper())  # another text: stored ids still apply
    assert lintf("fit", "--config", CONFIG, *bpe, *TINY, "--trainer.max_steps", "5", "--ckpt_path", "last") == 0
    resumed = last_checkpoint(tmp_path)
    assert resumed["global_step"] == 5 and tokenizer_from_checkpoint(resumed).to_dict() == stored.to_dict()
    assert lintf("predict", "--config", CONFIG, *bpe, *TINY, "--ckpt_path", "last") == 0
    stored.tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert lintf("fit", "--config", CONFIG, "--data.path", "my.txt", "--data.tokenizer", "bpe",
                 "--data.tokenizer_file", "tokenizer.json", *TINY, "--trainer.max_steps", "2",
                 "--trainer.default_root_dir", "from_file") == 0
    assert tokenizer_from_checkpoint(last_checkpoint(tmp_path / "from_file")).to_dict() == stored.to_dict()


def test_a_directory_of_txt_files_reads_as_one_text_of_bytes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "books").mkdir()
    for name in ("b.txt", "a.txt", "c.txt"):
        write_text(tmp_path / "books" / name, 8_000)
    assert lintf("fit", "--config", CONFIG, "--data.path", "books", "--data.tokenizer", "bytes", *TINY,
                 "--trainer.max_steps", "2") == 0
    assert tokenizer_from_checkpoint(last_checkpoint(tmp_path)).vocab_size == 256


def written(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.name not in ("small.txt", "photo.png"))


def test_a_text_too_small_for_one_segment_gets_one_paragraph_with_the_minimum(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_text(tmp_path / "small.txt", 500)
    assert lintf("fit", "--config", CONFIG, "--data.path", "small.txt", *TINY) == 2
    err = capsys.readouterr().err
    (error,) = [line for line in err.splitlines() if line.startswith("lintf: error:")]
    assert "TextStreamData: small.txt is too short:" in error and "a text needs at least 826 characters" in error
    assert "Traceback" not in err and written(tmp_path) == []


@pytest.mark.parametrize("tokenizer", ["char", "bytes"])
def test_a_binary_file_is_refused_in_one_paragraph_and_nothing_is_written(tmp_path, monkeypatch, capsys, tokenizer):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 100)
    assert lintf("fit", "--config", CONFIG, "--data.path", "photo.png", "--data.tokenizer", tokenizer, *TINY) == 2
    err = capsys.readouterr().err
    (error,) = [line for line in err.splitlines() if line.startswith("lintf: error:")]
    assert "photo.png is a binary file" in error and "path takes a UTF-8 text file, a directory of .txt" in error
    assert "Traceback" not in err and written(tmp_path) == []
