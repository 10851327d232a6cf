"""Benchmark plots: every series its own colour and marker; --replot redraws a PNG from the saved JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.plot_style import series_style

REPO = Path(__file__).resolve().parents[2]


def test_neighbouring_series_differ_in_colour_and_marker():
    styles = [series_style(i) for i in range(84)]
    for i in range(len(styles)):
        for j in range(i + 1, len(styles)):
            if j - i < 12:
                assert styles[i]["color"] != styles[j]["color"] and styles[i]["marker"] != styles[j]["marker"]
            assert styles[i] != styles[j]


SAVED = {
    "copy_convergence": {"settings": {"threshold": 0.5, "max_length": 8, "batch_size": 2},
                         "results": {name: {"losses": [2.0, 1.0, 0.5, 0.4]} for name in ("linear", "softmax")}},
    "asr_compare": {"settings": {"minutes": 1.0},
                    "results": {name: {"cer": 0.3, "seconds_per_epoch": 10.0} for name in ("linear", "softmax")}},
    "generation_throughput": [{"pixels": 16, "method": name, "profile": [[8, 1.0], [16, 2.0]]}
                              for name in ("linear", "softmax-kv-cache")],
}


@pytest.mark.parametrize("name", list(SAVED))
def test_replot_redraws_the_png_from_the_json(tmp_path, name):
    (tmp_path / f"{name}.json").write_text(json.dumps(SAVED[name]))
    subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--replot", "--out", str(tmp_path)], check=True,
                   cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
