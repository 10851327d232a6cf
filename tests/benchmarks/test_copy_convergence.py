"""benchmarks.copy_convergence --add: new rows beside the saved ones, only from the same settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = ["--steps", "3", "--batch-size", "2", "--max-length", "8", "--d-model", "8", "--n-layers", "1",
        "--n-heads", "1"]


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.copy_convergence", "--out", str(tmp_path), *options],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})


@pytest.mark.slow  # trains three tiny models, about a minute
def test_add_merges_new_variants_and_refuses_other_settings(tmp_path):
    assert run(tmp_path, *TINY, "--variants", "linear").returncode == 0
    first = json.loads((tmp_path / "copy_convergence.json").read_text())["results"]["linear"]
    added = run(tmp_path, *TINY, "--add", "--variants", "softmax")
    assert added.returncode == 0, added.stderr
    saved = json.loads((tmp_path / "copy_convergence.json").read_text())
    assert list(saved["results"]) == ["linear", "softmax"] and saved["results"]["linear"] == first
    assert saved["settings"]["variants"] == ["linear", "softmax"]
    table = (tmp_path / "copy_convergence.md").read_text()
    assert "| linear |" in table and "| softmax |" in table

    refused = run(tmp_path, *TINY[2:], "--steps", "4", "--add", "--variants", "local")
    assert refused.returncode != 0 and "steps: saved 3, now 4" in refused.stderr
    assert list(json.loads((tmp_path / "copy_convergence.json").read_text())["results"]) == ["linear", "softmax"]


def test_add_without_saved_results_says_to_run_first(tmp_path):
    refused = run(tmp_path, *TINY, "--add", "--variants", "linear")
    assert refused.returncode != 0 and "run without --add first" in refused.stderr
