"""``lintf compare RUN...``: two runs' curves in one PNG, and a table of their final metrics and differing settings.

The runs are written as lintf fit writes them, without training: a ``config.yaml`` and the metrics of
TensorBoard's event files (torch's SummaryWriter) or of a ``metrics.csv`` (the CSV logger's columns).
"""

from __future__ import annotations

import csv
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lintf.run.compare import figure_pixels
from tests.cli.helpers import REPO

STEPS = (10, 20, 30)


def write_config(run: Path, attention: str) -> None:
    config = {"model": {"class_path": "lintf.tasks.CopyTask",
                        "init_args": {"encoder": {"attention": attention, "d_model": 16}}},
              "trainer": {"max_steps": STEPS[-1]}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def tensorboard_run(run: Path, attention: str, values: dict[str, list[float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run.mkdir(parents=True)
    write_config(run, attention)
    with SummaryWriter(log_dir=str(run)) as writer:
        for index, step in enumerate(STEPS):
            writer.add_scalar("epoch", 0, step)
            for name, points in values.items():
                writer.add_scalar(name, points[index], step)


def csv_run(run: Path, attention: str, values: dict[str, list[float]]) -> None:
    """A run of the CSV logger: one row per logging call, the other metrics' cells empty."""
    run.mkdir(parents=True)
    write_config(run, attention)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")  # compare reads the run, never the checkpoint
    with open(run / "metrics.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["epoch", "step", *values])
        writer.writeheader()
        for index, step in enumerate(STEPS):
            for name, points in values.items():
                writer.writerow({"epoch": 0, "step": step, name: points[index]})


def curves(seed: int, *names: str) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {name: [rng.uniform(0.1, 5.0) for _ in STEPS] for name in names}


def lintf(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lintf.run.cli", "compare", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def parse_table(stdout: str) -> dict[str, dict[str, str]]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    start = next(index for index, line in enumerate(lines) if line.split()[:1] == ["run"])
    header = lines[start].split()
    rows = {}
    for line in lines[start + 1:start + 3]:
        cells = line.split()
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def test_two_runs_logged_differently_are_plotted_together_and_tabled(tmp_path):
    linear = curves(0, "train/loss", "val/loss", "val/accuracy")
    softmax = curves(1, "train/loss", "val/loss")
    tensorboard_run(tmp_path / "lightning_logs" / "version_0", "linear", linear)
    csv_run(tmp_path / "lightning_logs" / "version_1", "softmax", softmax)
    done = lintf("lightning_logs/version_0", "lightning_logs/version_1/checkpoints/last.ckpt", "--output", "runs.png",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = parse_table(done.stdout)
    assert set(rows) == {"version_0", "version_1"}
    for name, attention, values in (("version_0", "linear", linear), ("version_1", "softmax", softmax)):
        assert rows[name]["encoder.attention"] == attention
        for metric, points in values.items():
            assert float(rows[name][metric]) == pytest.approx(points[-1], rel=1e-5)
    assert rows["version_1"]["val/accuracy"] == "-"  # logged by one run only: tabled, not plotted
    assert "d_model" not in done.stdout and "max_steps" not in done.stdout  # the same in both runs
    assert png_size(tmp_path / "runs.png") == figure_pixels(2)  # train/loss and val/loss: the shared ones


def test_one_run_is_plotted_into_compare_png_by_default(tmp_path):
    tensorboard_run(tmp_path / "run", "linear", curves(2, "val/loss"))
    done = lintf("run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert png_size(tmp_path / "compare.png") == figure_pixels(1)


@pytest.mark.parametrize("case", ["missing", "not a run", "no metrics", "no run", "nothing shared"])
def test_what_is_not_a_run_with_metrics_is_refused_in_one_paragraph(tmp_path, case):
    tensorboard_run(tmp_path / "good", "linear", curves(3, "val/loss"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "fresh").mkdir()
    write_config(tmp_path / "fresh", "linear")
    csv_run(tmp_path / "other", "softmax", curves(4, "train/loss"))
    args = {"missing": ["good", "nowhere"], "not a run": ["good", "empty"], "no metrics": ["good", "fresh"],
            "no run": [], "nothing shared": ["good", "other"]}[case]
    done = lintf(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lintf compare: error:") and "Traceback" not in err, err
    expected = {"missing": "nowhere does not exist", "not a run": "empty is not a run",
                "no metrics": "run fresh has no metrics", "no run": "runs",
                "nothing shared": "share no metric to plot: good logged val/loss; other logged train/loss"}[case]
    assert expected in err
    assert not (tmp_path / "compare.png").exists()
