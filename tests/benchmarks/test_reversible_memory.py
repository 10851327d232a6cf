"""benchmarks.reversible_memory tables each depth with and without reversible layers (tiny sizes)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads resident memory from /proc")
def test_the_table_has_a_row_per_depth_and_the_ratios(tmp_path):
    command = [sys.executable, "-m", "benchmarks.reversible_memory", "--length", "64", "--layers", "1", "3",
               "--d-model", "16", "--heads", "2", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    table = (tmp_path / "reversible_memory.md").read_text()
    assert "--length 64 --layers 1 3 --d-model 16 --heads 2" in table
    rows = [line.strip("| ").split(" | ") for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row[0] for row in rows] == ["1", "3"] and all(len(row) == 3 for row in rows)
    assert "3 layers / 1 layers: stored activations" in table and "reversible" in table.splitlines()[-1]


def test_a_depth_below_one_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.reversible_memory", "--layers", "0", "--out",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "argument --layers: 0 is not allowed" in done.stderr
    assert not (tmp_path / "reversible_memory.md").exists()
