"""`lintf generate` journeys on tiny checkpoints in a temporary directory: text, copies and images, and
every kind of bad input reported in one paragraph with nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from lintf.data.copy import FIRST_SYMBOL, SEP
from lintf.data.tokenizers import TOKENIZER_KEY, CharTokenizer
from lintf.models import EncoderConfig
from lintf.run.checkpoint_files import VerifiedCheckpointIO
from lintf.run.cli import main
from lintf.tasks import CopyTask, ImageGenerationTask, StreamLanguageModelTask

TEXT = "in the beginning was the word, and the word was with god.\n"
TINY = EncoderConfig(d_model=16, n_layers=2, n_heads=2, dropout=0.0)
CLOSING = re.compile(r"^prompt (\d+) tokens, generated (\d+) tokens in [\d.]+ s \([\d.]+ tokens/s, prefill included\), "
                     r"peak memory \d+ MiB$")


def save_run(root: Path, task, version: int = 0, **extra) -> Path:
    """``task`` saved as a lintf run saves it: <root>/lightning_logs/version_N/checkpoints/last.ckpt (+ digest)."""
    run = root / "lightning_logs" / f"version_{version}"
    checkpoint = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), **extra}
    task.on_save_checkpoint(checkpoint)
    path = run / "checkpoints" / "last.ckpt"
    VerifiedCheckpointIO().save_checkpoint(checkpoint, path)
    (run / "config.yaml").write_text("model: {}\n")
    return path


def text_run(root: Path) -> tuple[Path, StreamLanguageModelTask, CharTokenizer]:
    tokenizer = CharTokenizer(TEXT)
    torch.manual_seed(0)
    task = StreamLanguageModelTask(tokenizer.vocab_size, 64, TINY).eval()
    return save_run(root, task, **{TOKENIZER_KEY: tokenizer.to_dict()}), task, tokenizer


def generate(args: list[str], capsys) -> tuple[str, list[str]]:
    """stdout and the stderr lines of a `lintf generate` that succeeds."""
    main(["generate", *args])
    captured = capsys.readouterr()
    return captured.out, captured.err.strip().splitlines()


def refused(args: list[str], capsys) -> str:
    """The one-paragraph error of a `lintf generate` that ends with exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("lintf generate: error:")]
    return line


def greedy_reference(task, prompt: list[int], count: int) -> list[int]:
    """Greedy continuation with every token fed through ``step``, argmax of the logits."""
    tokens, state = list(prompt), task.init_state(1)
    with torch.no_grad():
        for position in range(len(prompt) + count - 1):
            logits, state = task.step(torch.tensor([tokens[position]]), position, state)
            if position + 1 >= len(prompt):
                tokens.append(int(logits.argmax(-1)))
    return tokens[len(prompt):]


def test_text_is_streamed_greedily_and_the_closing_line_counts_tokens(tmp_path, capsys):
    path, task, tokenizer = text_run(tmp_path)
    out, err = generate(["--ckpt_path", str(path), "--prompt", "in the ", "--max_new_tokens", "30",
                         "--temperature", "0"], capsys)
    expected = tokenizer.decode(greedy_reference(task, tokenizer.encode("in the "), 30))
    assert out == "in the " + expected + "\n"
    assert f"checkpoint: {path} (StreamLanguageModelTask)" in err
    assert CLOSING.match(err[-1]).groups() == ("7", "30")
    assert not (path.parent.parent / "samples").exists()  # nothing written without --output


def test_same_seed_same_text_and_samples_written_into_the_run(tmp_path, capsys, monkeypatch):
    text_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    options = ["--ckpt_path", "last", "--prompt", "the word", "--max_new_tokens", "25", "--num_samples", "2",
               "--top_k", "8", "--top_p", "0.9", "--temperature", "0.8"]
    first, _ = generate([*options, "--seed", "4"], capsys)
    again, err = generate([*options, "--seed", "4", "--output", "words.txt"], capsys)
    other, _ = generate([*options, "--seed", "5"], capsys)
    assert first == again != other
    samples = re.split(r"--- sample \d of 2 ---\n", first)[1:]
    assert len(samples) == 2 and all(s.startswith("the word") and len(s) == len("the word") + 25 + 1 for s in samples)
    run = (tmp_path / "lightning_logs" / "version_0").resolve()
    assert f"run directory: {run}" in err and f"wrote {run / 'samples' / 'words.txt'}" in err
    assert (run / "samples" / "words.txt").read_text() == "\n".join(samples)


def test_copy_checkpoint_writes_symbols_after_the_separator(tmp_path, capsys):
    torch.manual_seed(0)
    task = CopyTask(12, 24, TINY).eval()
    path = save_run(tmp_path, task)
    out, err = generate(["--ckpt_path", str(path), "--prompt", "3 1 4 1 5", "--temperature", "0"], capsys)
    names = {SEP: "SEP", 0: "PAD"}
    copied = greedy_reference(task, [FIRST_SYMBOL + s for s in (3, 1, 4, 1, 5)] + [SEP], 5)
    assert out == "3 1 4 1 5 SEP " + "".join(f"{names.get(t, t - FIRST_SYMBOL)} " for t in copied) + "\n"
    assert CLOSING.match(err[-1]).groups() == ("6", "5")


def test_image_checkpoint_writes_a_png_grid_into_its_run(tmp_path, capsys):
    torch.manual_seed(0)
    task = ImageGenerationTask(256, 783, EncoderConfig(d_model=8, n_layers=1, n_heads=2, dropout=0.0)).eval()
    path = save_run(tmp_path, task, version=3, datamodule_hyper_parameters={"dataset": "mnist"})
    out, err = generate(["--ckpt_path", str(path), "--num_samples", "4", "--seed", "1"], capsys)
    grid = (tmp_path / "lightning_logs" / "version_3" / "samples" / "generate-seed1.png").resolve()
    assert out == f"{grid}\n" and f"run directory: {grid.parent.parent}" in err
    width, height = Image.open(grid).size
    assert width % 58 == 0 and height > width  # 2 x 2 images of 28 pixels, 2 apart (enlarged), a caption below
    assert CLOSING.match(err[-1]).groups() == ("1", str(4 * 783))
    generate(["--ckpt_path", str(path), "--num_samples", "4", "--seed", "1"], capsys)
    assert (grid.parent / "generate-seed1-1.png").read_bytes() == grid.read_bytes()  # same seed, same images


def test_a_checkpoint_from_outside_a_run_writes_into_a_new_run_directory(tmp_path, capsys):
    path, _, _ = text_run(tmp_path / "trained")
    elsewhere = tmp_path / "sent" / "model.ckpt"
    elsewhere.parent.mkdir()
    for suffix in ("", ".sha256"):
        elsewhere.with_name(elsewhere.name + suffix).write_bytes(path.with_name(path.name + suffix).read_bytes())
    root = tmp_path / "work"
    out, err = generate(["--ckpt_path", str(elsewhere), "--prompt", "the", "--max_new_tokens", "5",
                         "--root", str(root), "--output", "s.txt"], capsys)
    run = root / "lightning_logs" / "stream_lm-linear" / "version_0"  # named as the checkpoint's run would be
    assert f"run directory: {run}" in err and (run / "samples" / "s.txt").read_text() == out
    assert not (elsewhere.parent / "samples").exists()


@pytest.mark.parametrize("args, message", [
    (["--ckpt_path", "missing.ckpt", "--prompt", "the"], "checkpoint not found: missing.ckpt. --ckpt_path takes"),
    (["--prompt", ""], "the prompt '' is empty; give at least one token"),
    (["--prompt", "in the Zoo"], r"the characters 'Z' \(1 distinct\) are not in this character tokenizer's vocabulary"),
    (["--prompt", "in", "--temperature", "-1"],
     r"temperature must be a finite number >= 0 \(0 picks the most likely token"),
    (["--prompt", "in", "--top_p", "0"], r"top_p must lie in \(0, 1\]: the share of probability kept.*got 0.0"),
    (["--prompt", "in", "--top_p", "1.5"], r"top_p must lie in \(0, 1\].*got 1.5"),
    (["--prompt", "in", "--max_new_tokens", "0"], "--max_new_tokens must be >= 1, got 0"),
    (["--prompt", "in", "--num_samples", "0"], "--num_samples must be >= 1, got 0"),
])
def test_bad_input_is_one_paragraph_and_writes_nothing(args, message, tmp_path, capsys, monkeypatch):
    path, _, _ = text_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    ckpt = [] if "--ckpt_path" in args else ["--ckpt_path", str(path)]
    assert re.search(message, refused([*ckpt, *args, "--output", "x.txt"], capsys))
    assert not (path.parent.parent / "samples").exists()


def test_checkpoints_that_cannot_generate_are_refused(tmp_path, capsys):
    torch.manual_seed(0)
    copy = save_run(tmp_path, CopyTask(12, 24, TINY))
    message = refused(["--ckpt_path", str(copy), "--prompt", "1 2", "--max_new_tokens", "30"], capsys)
    assert "a prompt of 3 tokens and 30 new ones exceed this model's 24 positions" in message
    not_autoregressive = tmp_path / "speech.ckpt"
    VerifiedCheckpointIO().save_checkpoint({"lintf_task": "lintf.asr.model.task.ASRTask", "lintf_format": 1,
                                            "state_dict": {}}, not_autoregressive)
    message = refused(["--ckpt_path", str(not_autoregressive), "--prompt", "a"], capsys)
    assert "written by task lintf.asr.model.task.ASRTask, which does not generate token by token" in message
    assert "CopyTask, ImageGenerationTask, StreamLanguageModelTask" in message
    without_tokenizer = save_run(tmp_path, StreamLanguageModelTask(10, 24, TINY), version=1)
    assert "holds no tokenizer" in refused(["--ckpt_path", str(without_tokenizer), "--prompt", "a"], capsys)
    empty = tmp_path / "empty"
    empty.mkdir()
    message = refused(["--ckpt_path", "best", "--root", str(empty), "--prompt", "a"], capsys)
    assert "--ckpt_path best: no best.ckpt of an autoregressive task" in message and str(empty) in message


def test_the_lintf_command_streams_to_stdout_and_reports_on_stderr(tmp_path):
    path, _, _ = text_run(tmp_path)
    env = {**os.environ, "LINTF_EXTENSION": "off"}
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", "generate", "--ckpt_path", str(path), "--prompt",
                           "the", "--max_new_tokens", "12", "--seed", "3"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, check=True)
    assert done.stdout.startswith("the") and len(done.stdout) == len("the") + 12 + 1
    assert CLOSING.match(done.stderr.strip().splitlines()[-1]).groups() == ("3", "12")


@pytest.mark.slow
def test_compiled_step_writes_what_the_eager_step_writes(tmp_path, capsys):
    path, _, _ = text_run(tmp_path)
    options = ["--ckpt_path", str(path), "--prompt", "the word", "--max_new_tokens", "20", "--temperature", "0"]
    eager, _ = generate(options, capsys)
    compiled, err = generate([*options, "--compile"], capsys)
    assert compiled == eager and any(line.startswith(("compiled the step in", "running the eager step")) for line in err)
