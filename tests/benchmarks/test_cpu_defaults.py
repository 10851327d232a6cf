"""benchmarks.cpu_defaults: lintf's default threads against each explicit setting, idle and with a busy core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cpu_defaults import default_over_best, report, settings

REPO = Path(__file__).resolve().parents[2]


def test_settings_start_with_the_defaults_and_cover_every_combination():
    options = settings([1, 2], [0, 1, 2])
    assert options[0].label == "lintf defaults" and options[0].env == {} and options[0].workers is None
    combinations = {(o.env.get("OMP_NUM_THREADS"), o.env.get("OMP_WAIT_POLICY"), o.workers) for o in options[1:]}
    assert combinations == {(t, None, w) for t in ("1", "2") for w in (0, 1, 2)} | {("2", "passive", 0)}


def row(setting: str, seconds: float, grid: bool = True) -> dict:
    return {"setting": setting, "threads_used": 1, "steps": 400, "seconds": seconds, "wall_seconds": seconds + 9,
            "notes": [], "grid": grid}


def test_the_report_compares_the_defaults_with_the_best_setting():
    passive = "OMP_NUM_THREADS=2, OMP_WAIT_POLICY=passive, workers 0"
    results = {"idle": [row("lintf defaults", 30.0, False), row("OMP_NUM_THREADS=1, workers 0", 25.0),
                        row(passive, 10.0, False)],
               "one core busy": [row("lintf defaults", 20.0, False), row("OMP_NUM_THREADS=1, workers 0", 25.0),
                                 row("OMP_NUM_THREADS=2, workers 0", 125.0)]}
    assert default_over_best(results["idle"]) == pytest.approx(1.2)  # passive is shown, not compared
    assert default_over_best(results["one core busy"]) == pytest.approx(0.8)
    text = "\n".join(report(results, {"idle": (0.1, 0.9), "one core busy": (1.0, 1.9)}, "python -m x", 2))
    assert "| idle | 30.0 | 25.0 | OMP_NUM_THREADS=1, workers 0 | 1.20 |" in text
    assert "| one core busy | 20.0 | 25.0 | OMP_NUM_THREADS=1, workers 0 | 0.80 |" in text
    assert "| OMP_NUM_THREADS=2, workers 0 | 1 | 400 | 125.0 | 134.0 | 5.00x |" in text
    assert f"| {passive} | 1 | 400 | 10.0 | 19.0 | 0.40x |" in text


@pytest.mark.slow
def test_a_short_run_tables_both_conditions(tmp_path):
    command = [sys.executable, "-m", "benchmarks.cpu_defaults", "--steps", "20", "--threads", "1", "--workers", "0",
               "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    saved = json.loads((tmp_path / "cpu_defaults.json").read_text())
    assert list(saved["results"]) == ["idle", "one core busy"]
    for rows in saved["results"].values():
        assert [r["setting"] for r in rows] == ["lintf defaults", "OMP_NUM_THREADS=1, workers 0"]
        assert all(r["steps"] == 20 and r["seconds"] > 0 for r in rows)
        assert rows[1]["threads_used"] == 1
    cpus = len(os.sched_getaffinity(0))
    if cpus >= 2:  # the spinning process takes a CPU: lintf leaves it out
        assert saved["results"]["one core busy"][0]["threads_used"] <= cpus - 1
    text = (tmp_path / "cpu_defaults.md").read_text()
    assert "## one core busy" in text and "--steps 20 --threads 1 --workers 0" in text
