"""A stream language model's fit warns about nothing of its own making, and a resumed or extended fit reads the
text on from where the run stopped, as one uninterrupted run reads it.

The model is configs/stream_lm.yaml's, shrunk to seconds, trained on a text of the user's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lintf.data.text_segments import Segments
from lintf.run.cli import main
from lintf.tasks.stream_lm import StreamLanguageModelTask
from tests.journeys.test_own_text import CONFIG, TINY, write_text

SHORT = ["--data.segment_length", "32", "--data.eval_length", "128", "--data.batch_size", "4",
         "--trainer.limit_val_batches", "1"]


def fit(root: Path, steps: int, *extra: str) -> None:
    try:
        main(["fit", "--config", CONFIG, "--data.path", str(root / "my.txt"), *TINY, *SHORT,
              "--trainer.default_root_dir", str(root), "--trainer.max_steps", str(steps), *extra])
    except SystemExit as error:
        pytest.fail(f"lintf fit exited with {error.code}")


def record_batches(monkeypatch) -> list[tuple[torch.Tensor, bool]]:
    """Every training batch's tokens and ``first`` flag, as the task receives them."""
    seen: list[tuple[torch.Tensor, bool]] = []
    training_step = StreamLanguageModelTask.training_step

    def recording(self, batch, batch_idx):
        seen.append((batch["tokens"].clone(), bool(batch["first"])))
        return training_step(self, batch, batch_idx)

    monkeypatch.setattr(StreamLanguageModelTask, "training_step", recording)
    return seen


def test_a_resumed_fit_reads_on_where_the_run_stopped(tmp_path, monkeypatch):
    for root in (tmp_path / "whole", tmp_path / "parts"):
        root.mkdir()
        write_text(root / "my.txt", 20_480)
    seen = record_batches(monkeypatch)
    fit(tmp_path / "whole", 6)
    whole = list(seen)
    seen.clear()
    fit(tmp_path / "parts", 3)
    fit(tmp_path / "parts", 6, "--ckpt_path", "last")
    assert len(whole) == len(seen) == 6
    for (tokens, _), (same, _) in zip(whole, seen):
        assert torch.equal(tokens, same)  # segments 0, 1, 2, then 3, 4, 5: the text read on, not again
    assert [first for _, first in whole] == [True, False, False, False, False, False]
    assert [first for _, first in seen] == [True, False, False, True, False, False]  # no carried state is saved


def test_segments_resume_at_the_saved_batch_and_the_next_pass_starts_over():
    rows = torch.arange(2 * 41).view(2, 41)  # 2 streams: segments of 8 tokens, 5 of them
    segments = Segments(rows, segment_length=8, batch_size=2)
    reading = iter(segments)
    for _ in range(2):
        next(reading)
    state = segments.state_dict()
    resumed = Segments(rows, segment_length=8, batch_size=2)
    resumed.load_state_dict(state)
    starts = [int(batch["tokens"][0, 0]) for batch in resumed]
    assert state == {"next": 2} and starts == [16, 24, 32]  # rows[0, j*8] for j = 2, 3, 4
    assert [int(batch["tokens"][0, 0]) for batch in resumed] == [0, 8, 16, 24, 32]
    assert resumed.state_dict() == {"next": 0}  # a pass read to its end: the next one starts over


def test_a_fit_and_its_resumption_print_no_data_loader_warnings(tmp_path):
    write_text(tmp_path / "my.txt", 20_480)
    command = [sys.executable, "-m", "lintf_cli", "fit", "--config", CONFIG, "--data.path", "my.txt", *TINY, *SHORT]
    errors = []
    for steps, extra in ((3, []), (6, ["--ckpt_path", "last"])):
        result = subprocess.run([*command, "--trainer.max_steps", str(steps), *extra], cwd=tmp_path,
                                capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr
        assert "fit: 3 steps in" in result.stdout, result.stdout  # the first 3 steps, then 3 more
        errors.append(result.stderr)
    for stderr in errors:
        assert "IterableDataset" not in stderr and "__len__" not in stderr, stderr
        assert "not resumable" not in stderr, stderr
