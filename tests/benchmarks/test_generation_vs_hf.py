"""benchmarks.generation_vs_hf runs end to end at tiny sizes and writes its table, JSON and plot."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "LINTF_EXTENSION": "off"}


@pytest.mark.slow
def test_generation_vs_hf_writes_table_json_and_plot(tmp_path):
    command = [sys.executable, "-m", "benchmarks.generation_vs_hf", "--contexts", "16", "48", "--new-tokens", "4",
               "--d-model", "16", "--layers", "1", "--heads", "2", "--steps", "eager", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env=ENV)
    rows = json.loads((tmp_path / "generation_vs_hf.json").read_text())["rows"]
    assert [(r["series"], r["context"]) for r in rows] == [("lintf-eager", 16), ("hf", 16), ("lintf-eager", 48), ("hf", 48)]
    for row in rows:
        assert row["tokens_per_second"] > 0 and row["peak_mb"] > 0
        assert row["ms_per_token"] == pytest.approx(1000 / row["tokens_per_second"])
    hf = [r for r in rows if r["series"] == "hf"]
    assert hf[1]["context_mb"] == pytest.approx(3 * hf[0]["context_mb"])  # GPT-2's cache grows with the context
    lintf = [r for r in rows if r["series"] == "lintf-eager"]
    assert lintf[0]["context_mb"] == lintf[1]["context_mb"] > 0  # lintf's state does not
    assert all(0 < r["cpu_ms_per_token"] <= 1.5 * r["seconds"] * 1000 for r in lintf)  # a median of per-token times
    table = (tmp_path / "generation_vs_hf.md").read_text()
    assert "slowest / fastest CPU time per token over 16 to 48 tokens of context" in table and "| 48 | " in table
    assert table.count("CPU ms/token") == 1 + 1  # the method's sentence and lintf's column
    assert (tmp_path / "generation_vs_hf.png").stat().st_size > 0


def test_generation_vs_hf_refuses_heads_that_do_not_divide_the_width(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.generation_vs_hf", "--d-model", "30", "--heads", "4",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert done.returncode == 2 and "--d-model 30 must be a multiple of --heads 4" in done.stderr
    assert not (tmp_path / "generation_vs_hf.md").exists()
