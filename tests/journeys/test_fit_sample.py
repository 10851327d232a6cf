"""A text model's fit ends with a short sample of its writing: seeded, what ``lintf.load(...).generate`` writes,
and never the run's failure.

The model is configs/stream_lm.yaml's, shrunk to seconds, trained on a text of the user's own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import lintf
from lintf.generation.command import generate
from lintf.run.callbacks import fit_sample
from lintf.run.cli import main
from tests.cli.helpers import tiny
from tests.journeys.test_own_text import CONFIG, TINY, write_text

SHORT_TEXT = ["--data.segment_length", "32", "--data.eval_length", "128", "--data.batch_size", "4",
              "--trainer.max_steps", "3", "--trainer.limit_val_batches", "1"]
SAMPLE = re.compile(r"^sample \(a validation text's first (\d+) tokens, then (\d+) sampled at temperature "
                    r"([0-9.]+), seed (\d+)\): (.*) -> (.*)$", re.MULTILINE)


def fit_text(tmp_path: Path, *extra: str) -> None:
    """``lintf fit`` of a tiny stream LM on a text of its own under ``tmp_path``."""
    write_text(tmp_path / "mytext.txt", 20_480)
    try:
        main(["fit", "--config", CONFIG, "--data.path", str(tmp_path / "mytext.txt"), *TINY, *SHORT_TEXT,
              "--trainer.default_root_dir", str(tmp_path), *extra])
    except SystemExit as error:
        pytest.fail(f"lintf fit exited with {error.code}")


def test_a_text_fit_ends_with_the_sample_its_checkpoint_generates(tmp_path, capsys):
    fit_text(tmp_path)
    out = capsys.readouterr().out
    match = SAMPLE.search(out)
    assert match is not None, out
    prompt_tokens, new_tokens, temperature, seed = int(match[1]), int(match[2]), float(match[3]), int(match[4])
    prompt, continuation = ast.literal_eval(match[5]), ast.literal_eval(match[6])
    assert (prompt_tokens, new_tokens) == (fit_sample.PROMPT_TOKENS, fit_sample.NEW_TOKENS)
    assert len(prompt) == prompt_tokens and len(continuation) == new_tokens  # a character model: a token a character
    text = (tmp_path / "mytext.txt").read_text()
    assert prompt in text and text[text.index(prompt) - 1] == "\n"  # from the start of a line of the text
    # the same sample from the run's last checkpoint, by lintf.load's generate (the last.ckpt holds the final weights)
    last = tmp_path / "lightning_logs" / "stream_lm-linear-mytext" / "version_0" / "checkpoints" / "last.ckpt"
    generated = lintf.load(str(last)).generate(prompt, max_new_tokens=new_tokens, temperature=temperature, seed=seed)
    assert generated == prompt + continuation


def test_the_sample_uses_the_generate_commands_default_temperature():
    import inspect

    assert fit_sample.TEMPERATURE == inspect.signature(generate).parameters["temperature"].default


def test_a_failed_sample_is_one_line_and_the_run_succeeds(tmp_path, capsys, monkeypatch):
    from lintf.tasks.stream_lm import StreamLanguageModelTask

    def broken(self, ids):
        raise RuntimeError("no state for you")

    monkeypatch.setattr(StreamLanguageModelTask, "prefill", broken)
    fit_text(tmp_path)
    out = capsys.readouterr().out
    assert "sample: not drawn (RuntimeError: no state for you)" in out.splitlines()
    run = tmp_path / "lightning_logs" / "stream_lm-linear-mytext" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_a_copy_fit_prints_no_sample(tmp_path, capsys):
    main(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"))
    out = capsys.readouterr().out
    assert re.search(r"^fit: 2 steps", out, re.MULTILINE) and "sample" not in out


def test_resuming_a_finished_run_says_there_is_nothing_to_train(tmp_path, capsys):
    finished = ["--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"]
    main(tiny(tmp_path, *finished))
    capsys.readouterr()
    main(tiny(tmp_path, *finished, "--ckpt_path", "last"))
    out = capsys.readouterr().out
    assert "fit: nothing to train, the run had reached max_steps 2; train it longer with --trainer.max_steps N " \
           "(more than 2)" in out.splitlines()
