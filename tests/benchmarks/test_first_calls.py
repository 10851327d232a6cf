"""benchmarks.first_calls tables each call of each process; the CPU benchmarks refuse counts below one."""

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


@pytest.mark.parametrize("module, arguments, message", [
    ("benchmarks.first_calls", ["--calls", "0"], "argument --calls: 0 is not allowed: give a whole number of at least 1"),
    ("benchmarks.first_calls", ["--threads", "1", "two"], "argument --threads: 'two' is not a whole number"),
    ("benchmarks.thread_shapes", ["--threads", "-2"], "argument --threads: -2 is not allowed"),
    ("benchmarks.causal_product", ["--lengths", "0"], "argument --lengths: 0 is not allowed"),
])
def test_counts_below_one_are_refused_before_measuring(module, arguments, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", module, *arguments], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and message in done.stderr, done.stderr
