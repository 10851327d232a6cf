"""benchmarks.asr_compare runs end to end (seconds per attention on a tone corpus)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_asr_compare_writes_table(corpus, tmp_path):
    out = tmp_path / "results"
    tiny = ["--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
            "--model.init_args.encoder.n_heads", "2",
            "--model.init_args.conv_channels", "4", "--data.init_args.batch_size", "3",
            "--data.init_args.num_workers", "0", "--trainer.max_epochs", "2"]
    subprocess.run([sys.executable, "-m", "benchmarks.asr_compare", "--minutes", "0.2", "--warmup", "2",
                    "--corpus", str(corpus["train"].parent), "--out", str(out), "--", *tiny], check=True, cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    table = (out / "asr_compare.md").read_text()
    assert "| softmax |" in table and "| linear |" in table and "| reformer |" in table and "1.00x" in table
    results = json.loads((out / "asr_compare.json").read_text())["results"]
    assert all(r["epochs"] == 2 for r in results.values())
    assert (out / "asr_compare.png").is_file()
