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


@pytest.mark.slow  # trains four tiny models on the Bible's streams
def test_add_merges_new_attentions_and_refuses_other_settings(tmp_path):
    first = run(tmp_path, "--attentions", "linear", *TINY)
    assert first.returncode == 0, first.stderr[-2000:]
    linear_rows = json.loads((tmp_path / "stream_lm.json").read_text())["results"]
    added = run(tmp_path, "--add", "--attentions", "gla", *TINY)
    assert added.returncode == 0, added.stderr[-2000:]
    saved = json.loads((tmp_path / "stream_lm.json").read_text())
    assert saved["attentions"] == ["linear", "gla"] and saved["results"][:2] == linear_rows
    assert [(r["attention"], r["between_segments"]) for r in saved["results"][2:]] == [("gla", "carry"),
                                                                                      ("gla", "reset")]
    table = (tmp_path / "stream_lm.md").read_text()
    assert "--attentions linear gla" in table and "| linear | carry |" in table and "| gla | reset |" in table

    refused = run(tmp_path, "--add", "--attentions", "delta_net", "--steps", "3", *TINY[2:])
    assert refused.returncode != 0 and "same settings" in refused.stderr
    assert json.loads((tmp_path / "stream_lm.json").read_text()) == saved


def test_add_without_saved_results_says_how_to_start(tmp_path):
    done = run(tmp_path, "--add", "--attentions", "gla")
    assert done.returncode != 0 and "run without --add first" in done.stderr
