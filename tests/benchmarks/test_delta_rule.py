"""benchmarks.delta_rule at a tiny size: every implementation gets a row and the target ratios are stated."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from lintf.ops.delta import compiled as delta_compiled
from lintf.ops.gla import compiled as gla_compiled

REPO = Path(__file__).resolve().parents[2]


def compiled_ops_available() -> bool:
    return delta_compiled.serves(torch.device("cpu")) and gla_compiled.serves(torch.device("cpu"))


def test_tiny_run_tables_every_implementation(tmp_path):
    command = [sys.executable, "-m", "benchmarks.delta_rule", "--lengths", "64", "--dims", "16", "--threads", "1",
               "--repeats", "1", "--recurrent-max", "32", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    table = (tmp_path / "delta_rule.md").read_text()
    rows = json.loads((tmp_path / "delta_rule.json").read_text())["rows"]
    measured = {(row["op"], row["implementation"]) for row in rows}
    assert {("delta rule", "pytorch"), ("gla", "pytorch"), ("causal product", "compiled")} <= measured
    assert not any("recurrent" in name for _, name in measured)  # N = 64 is above --recurrent-max 32
    assert all(row["fwd"] > 0 and row["fwd+bwd"] > 0 for row in rows)
    assert "--lengths 64 --dims 16" in table and "| op | implementation |" in table
    if compiled_ops_available():
        assert {("delta rule", "compiled"), ("gla", "compiled")} <= measured
        assert "pytorch / compiled fwd+bwd" in table and "(target >= 5x)" in table


def test_lengths_below_one_are_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.delta_rule", "--lengths", "0"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode != 0 and "argument --lengths: 0 is not allowed" in done.stderr
