"""benchmarks.hf_generate runs end to end at tiny sizes: both systems choose the same tokens, the table is written."""

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
def test_hf_generate_writes_its_table(tmp_path):
    command = [sys.executable, "-m", "benchmarks.hf_generate", "--contexts", "16", "40", "--new-tokens", "5",
               "--d-model", "16", "--layers", "1", "--heads", "2", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=tmp_path, capture_output=True, env=ENV)
    rows = json.loads((tmp_path / "hf_generate.json").read_text())["rows"]
    assert [(r["system"], r["context"]) for r in rows] == [("lintf", 16), ("transformers", 16), ("lintf", 40),
                                                             ("transformers", 40)]
    assert rows[0]["tokens"] == rows[1]["tokens"] and len(rows[0]["tokens"]) == 5  # checked in the run too
    assert all(r["tokens_per_second"] > 0 and 0 < r["cpu_ms_per_token"] for r in rows)
    assert all(r["ms_per_token"] == pytest.approx(1000 / r["tokens_per_second"]) for r in rows)
    table = (tmp_path / "hf_generate.md").read_text()
    assert "at 40 tokens: transformers' generate takes" in table and "| 40 | transformers |" in table
