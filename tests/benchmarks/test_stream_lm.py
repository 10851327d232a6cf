"""benchmarks.stream_lm --add: new attentions' rows beside the saved ones, only from the same settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = ["--steps", "2", "--eval-lengths", "256", "--", "--model.init_args.encoder.d_model", "8",
        "--model.init_args.encoder.n_layers", "1", "--model.init_args.encoder.n_heads", "1",
        "--model.init_args.encoder.d_ff", "16", "--trainer.limit_test_batches", "2"]


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.stream_lm", "--out", str(tmp_path), *options],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})


def start(tmp_path: Path, log: Path, *options: str) -> subprocess.Popen:
    """A run in the background, its output to log (a pipe nobody reads could fill and stall it)."""
    with log.open("w") as output:
        return subprocess.Popen([sys.executable, "-m", "benchmarks.stream_lm", "--out", str(tmp_path), *options],
                                cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})


@pytest.mark.slow  # trains six tiny models on the Bible's streams
def test_add_merges_new_attentions_and_refuses_other_settings(tmp_path):
    first = run(tmp_path, "--attentions", "linear", *TINY)
    assert first.returncode == 0, first.stderr[-2000:]
    linear_rows = json.loads((tmp_path / "stream_lm.json").read_text())["results"]
    logs = {name: tmp_path / f"{name}.log" for name in ("gla", "delta_net")}
    side_by_side = {name: start(tmp_path, log, "--add", "--attentions", name, *TINY) for name, log in logs.items()}
    for name, process in side_by_side.items():
        assert process.wait() == 0, logs[name].read_text()[-2000:]
    saved = json.loads((tmp_path / "stream_lm.json").read_text())
    assert saved["results"][:2] == linear_rows and sorted(saved["attentions"]) == ["delta_net", "gla", "linear"]
    assert sorted((r["attention"], r["between_segments"]) for r in saved["results"][2:]) == [
        ("delta_net", "carry"), ("delta_net", "reset"), ("gla", "carry"), ("gla", "reset")]
    table = (tmp_path / "stream_lm.md").read_text()
    assert "| linear | carry |" in table and "| gla | reset |" in table and "| delta_net | carry |" in table

    refused = run(tmp_path, "--add", "--attentions", "gated_delta_net", "--steps", "3", *TINY[2:])
    assert refused.returncode != 0 and "same settings" in refused.stderr
    assert json.loads((tmp_path / "stream_lm.json").read_text()) == saved


def test_add_without_saved_results_says_how_to_start(tmp_path):
    done = run(tmp_path, "--add", "--attentions", "gla")
    assert done.returncode != 0 and "run without --add first" in done.stderr
