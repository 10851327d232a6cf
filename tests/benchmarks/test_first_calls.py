"""benchmarks.first_calls runs each thread count in its own process and tables every call."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lintf.ops import compiled_op_available

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not compiled_op_available("cpu"), reason="the compiled CPU op is not available")
def test_first_calls_tables_each_call_of_each_process(tmp_path):
    command = [sys.executable, "-m", "benchmarks.first_calls", "--n", "64", "--calls", "3", "--threads", "1", "2",
               "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    table = (tmp_path / "first_calls.md").read_text()
    assert "--n 64 --calls 3 --threads 1 2" in table
    for mode in ("fwd", "fwd+bwd"):
        section = table.split(f"## {mode}\n", 1)[1].split("\n## ", 1)[0]
        rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
        assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 3"]
        for row in rows:
            cells = row.strip("| ").split(" | ")[1:]
            assert len(cells) == 2 and all(float(c.split(" / ")[0]) > 0 for c in cells)
        assert f"Slowest {mode} call:" in section
