"""benchmarks.training_step: --quick runs both loops end to end and writes a well-formed table and JSON; --add
merges more cells into it, only from the same protocol."""

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from benchmarks.training_step import StepClock, headline

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "LINTF_EXTENSION": "off"}


def test_quick_run_writes_table_and_json(tmp_path):
    command = [sys.executable, "-m", "benchmarks.training_step", "--quick", "--lengths", "32", "--attentions",
               "linear", "softmax", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env=ENV)
    rows = json.loads((tmp_path / "training_step.json").read_text())["rows"]
    assert [(r["d_model"], r["length"], r["attention"]) for r in rows] == [(32, 32, "linear"), (32, 32, "softmax")]
    for row in rows:
        assert row["tokens"] == row["batch"] * 32
        for loop in ("lightning", "plain"):
            assert len(row[loop]["steps"]) == 2 and row[loop]["tokens_per_second"] > 0
        assert row["overhead"] == pytest.approx(row["lightning"]["step_seconds"] / row["plain"]["step_seconds"] - 1)
        assert 0 <= row["attention_share"] <= 1 and 0 < len(row["top_other_ops"]) <= 5
    assert rows[1]["attention_share"] > 0  # SDPA runs whatever the extension
    table = (tmp_path / "training_step.md").read_text()
    assert "Lightning's step over the plain loop's" in table and "softmax's step over linear's" not in table
    assert "| 32 | 32 | 4 | fp32 | 1 | softmax |" in table and "model name" not in table


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "benchmarks.training_step", "--quick", "--out", str(tmp_path), *options]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=ENV, check=False)


def test_add_merges_cells_replaces_measured_ones_and_refuses_another_protocol(tmp_path):
    assert "run without --add first" in run(tmp_path, "--add", "--lengths", "32").stderr
    assert run(tmp_path, "--lengths", "32", "--attentions", "softmax", "linear").returncode == 0
    first = json.loads((tmp_path / "training_step.json").read_text())["rows"]
    assert run(tmp_path, "--add", "--lengths", "64", "32", "--attentions", "linear").returncode == 0
    saved = json.loads((tmp_path / "training_step.json").read_text())
    cells = [(r["length"], r["attention"]) for r in saved["rows"]]
    assert cells == [(32, "linear"), (32, "softmax"), (64, "linear")]  # grid order, the (32, linear) cell once
    assert saved["rows"][1] == next(r for r in first if r["attention"] == "softmax")  # kept as measured
    assert saved["rows"][0] != next(r for r in first if r["attention"] == "linear")  # measured again
    assert [r["settings"]["lengths"] for r in saved["runs"]] == [[32], [64, 32]]
    table = (tmp_path / "training_step.md").read_text()
    assert "--attentions softmax linear` (load average" in table and "; then `python -m benchmarks.training_step" in table
    refused = run(tmp_path, "--add", "--lengths", "32", "--tokens", "64")
    assert refused.returncode != 0 and "same protocol" in refused.stderr and "'tokens': 128" in refused.stderr
    assert json.loads((tmp_path / "training_step.json").read_text()) == saved  # nothing lost


def row(attention: str, length: int, plain: float, lightning: float) -> dict:
    return {"d_model": 256, "length": length, "dtype": "fp32", "threads": 1, "attention": attention,
            "plain": {"step_seconds": plain}, "lightning": {"step_seconds": lightning},
            "overhead": lightning / plain - 1}


def test_headline_gives_each_target_as_met_or_missed_with_its_ratio():
    lines = headline([row("linear", 1024, 1.0, 1.02), row("softmax", 1024, 1.5, 1.53),
                      row("linear", 4096, 1.0, 1.01), row("softmax", 4096, 3.0, 3.0)])
    assert lines[0].endswith("(target: under 5%; met)") and "largest +2.0%" in lines[0]
    assert "from 1.50x (d_model 256, N = 1,024" in lines[1] and "to 3.00x" in lines[1] and lines[1].endswith("met)")
    missed = headline([row("linear", 1024, 2.0, 2.2), row("softmax", 1024, 1.0, 1.0)])
    assert missed[0].endswith("missed)") and "from 0.50x" in missed[1] and missed[1].endswith("missed)")


def test_step_clock_skips_the_warmup_and_stops_at_the_count_or_the_budget():
    clock = StepClock(warmup=2, steps=3, budget=1e12)
    clock.ends = [0.0, 5.0, 6.0]  # steps 2 and 3 took 5 and 1 s; the first two are warm-up
    assert clock.timed() == [1.0]
    assert not clock.tick() and len(clock.timed()) == 2  # 2 of 3 timed steps, within the budget
    assert clock.tick() and len(clock.timed()) == 3
    slow = StepClock(warmup=1, steps=10, budget=1.0)
    slow.ends = [0.0, 2.0]
    assert slow.tick()  # two timed steps past the budget are enough
