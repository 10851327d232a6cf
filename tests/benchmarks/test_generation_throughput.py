"""benchmarks.generation_throughput runs end to end on tiny images and writes its table."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULE = [sys.executable, "-m", "benchmarks.generation_throughput"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_generation_throughput_writes_table(tmp_path):
    command = [*MODULE, "--pixels", "12",
               "--methods", "linear", "softmax-recompute", "--max-batch", "2", "--memory-budget-mb", "64",
               "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env=ENV)
    rows = json.loads((tmp_path / "generation_throughput.json").read_text())
    assert [r["method"] for r in rows] == ["linear", "softmax-recompute"]
    for row in rows:
        assert row["batch"] == 2 and row["images_per_second"] > 0 and row["how"] == "all steps"
        positions = [position for position, _ in row["profile"]]
        assert len(positions) == 8 and positions == sorted(set(positions)) and positions[-1] == 12
    table = (tmp_path / "generation_throughput.md").read_text()
    assert "| 12 | linear | 2 |" in table and "| 12 | softmax-recompute | 2 |" in table and "| 1x |" in table
    assert (tmp_path / "generation_throughput.png").is_file()


def test_generation_throughput_rejects_mismatched_batch_caps(tmp_path):
    command = [*MODULE, "--pixels", "12", "16",
               "--max-batch", "1", "2", "3", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=ENV)
    assert done.returncode == 2
    assert "--max-batch takes 1 or 2 values (one per --pixels), got 3" in done.stderr
    assert not (tmp_path / "generation_throughput.md").exists()
