"""One run directory per experiment: test, predict and a resumed fit of a run's checkpoint write into that run.

Each journey runs the ``lintf`` command (``main``, the console script's function) on a tiny copy task
under tmp_path, one command after another as a user types them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

from lintf.layout.directories import run_directory_of
import lintf.run.logger_placement as logger_placement
from lintf.run.cli import main
from tests.cli.helpers import REPO, tiny

VALIDATE_EVERY_2 = ["--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]


def lintf(tmp_path: Path, subcommand: str, *extra: str) -> None:
    """``lintf <subcommand>`` of the tiny copy experiment under ``tmp_path``; fails the test on a non-zero exit."""
    try:
        main(tiny(tmp_path, *extra, subcommand=subcommand))
    except SystemExit as error:
        pytest.fail(f"lintf {subcommand} exited with {error.code}")


def printed_run_directories(out: str) -> list[str]:
    return re.findall(r"^run directory: (.*)$", out, flags=re.MULTILINE)


def scalar_steps(directory: Path) -> dict[str, list[int]]:
    """TensorBoard's view of ``directory``: the steps of each scalar, orphaned events purged as TensorBoard does."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = event_accumulator.EventAccumulator(str(directory))
    events.Reload()
    return {tag: [event.step for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def run_directories(root: Path) -> list[str]:
    runs = root / "lightning_logs"
    return sorted(str(path.relative_to(runs)) for path in runs.glob("*/version_*"))


def test_test_predict_and_resume_stay_in_the_run(tmp_path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lintf(tmp_path, "fit", "--trainer.max_steps", "5", *VALIDATE_EVERY_2)  # validates (last.ckpt) at 2, 4 and 5
        lintf(tmp_path, "test", "--ckpt_path", "last")
        lintf(tmp_path, "predict", "--ckpt_path", "last")
        lintf(tmp_path, "fit", "--trainer.max_steps", "8", *VALIDATE_EVERY_2, "--ckpt_path", "last")
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    assert run_directories(tmp_path) == ["copy-linear/version_0"]
    assert printed_run_directories(capsys.readouterr().out) == [str(run)] * 8  # each command: at start and at end
    assert not [w for w in caught if "dirpath has changed" in str(w.message) or "not empty" in str(w.message)]
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config-fit.yaml", "config-predict.yaml",
                                                             "config-test.yaml", "config.yaml"]
    rows = (run / "predictions" / "predictions.jsonl").read_text().splitlines()
    assert len(rows) == 16 and json.loads((run / "predictions" / "prediction_metrics.json").read_text())["n"] == 16
    steps = scalar_steps(run)
    # One curve: the resumed fit continues the first one's; the first fit's step past its checkpoint is dropped.
    assert steps["train/loss"] == list(range(8)), steps["train/loss"]
    # every 2 steps, and at the first fit's last step (5, logged at 4 as each validation is at its step - 1)
    assert steps["val/loss"] == [1, 3, 4, 5, 7] and "test/loss" in steps


def test_a_second_predict_keeps_the_first(tmp_path):
    lintf(tmp_path, "fit", "--trainer.max_steps", "2", *VALIDATE_EVERY_2)
    lintf(tmp_path, "predict", "--ckpt_path", "last")
    lintf(tmp_path, "predict", "--ckpt_path", "best", "--data.predict_size", "8")
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    assert len((run / "predictions" / "predictions.jsonl").read_text().splitlines()) == 16
    assert len((run / "predictions-1" / "predictions.jsonl").read_text().splitlines()) == 8


def test_a_checkpoint_from_elsewhere_gets_a_new_run_directory(tmp_path, capsys):
    lintf(tmp_path, "fit", "--trainer.max_steps", "2", *VALIDATE_EVERY_2)
    sent = tmp_path / "from_a_colleague"
    sent.mkdir()
    for name in ("last.ckpt", "last.ckpt.sha256"):
        shutil.copy(tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / name, sent / name)
    assert run_directory_of(str(sent / "last.ckpt")) is None
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lintf(tmp_path, "predict", "--ckpt_path", str(sent / "last.ckpt"))
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    new = tmp_path / "lightning_logs" / "copy-linear" / "version_1"
    assert (new / "predictions" / "predictions.jsonl").is_file() and (new / "config.yaml").is_file()
    assert printed_run_directories(capsys.readouterr().out) == [str(new)] * 2
    assert sorted(os.listdir(sent)) == ["last.ckpt", "last.ckpt.sha256"]


def test_a_run_directory_that_cannot_be_written_is_left_alone(tmp_path, capsys, monkeypatch):
    lintf(tmp_path, "fit", "--trainer.max_steps", "2", *VALIDATE_EVERY_2)
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    real_access = os.access
    monkeypatch.setattr(logger_placement.os, "access", lambda path, mode: path != str(run) and real_access(path, mode))
    lintf(tmp_path, "test", "--ckpt_path", "last")
    assert f"lintf: cannot write into {run}" in capsys.readouterr().err
    assert run_directories(tmp_path) == ["copy-linear/version_0", "copy-linear/version_1"]
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.yaml"]


def test_a_run_without_a_logger_is_continued_too(tmp_path):
    no_logger = ["--trainer.logger", "false", "--trainer.callbacks", "[]"]
    lintf(tmp_path, "fit", "--trainer.max_steps", "2", *VALIDATE_EVERY_2, *no_logger)
    lintf(tmp_path, "predict", "--ckpt_path", "last", *no_logger)
    lintf(tmp_path, "fit", "--trainer.max_steps", "4", *VALIDATE_EVERY_2, *no_logger, "--ckpt_path", "last")
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    assert run_directories(tmp_path) == ["copy-linear/version_0"]
    assert (run / "predictions" / "predictions.jsonl").is_file()
    assert sorted(p.name for p in (run / "checkpoints").glob("*.ckpt")) == ["best.ckpt", "last.ckpt"]


def test_the_run_directory_is_printed_as_an_absolute_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", *tiny(Path("runs"), "--trainer.max_steps", "2", *VALIDATE_EVERY_2)[1:]])
    main(["test", *tiny(Path("runs"), "--ckpt_path", "last")[1:]])
    run = str(tmp_path / "runs" / "lightning_logs" / "copy-linear" / "version_0")
    assert printed_run_directories(capsys.readouterr().out) == [run] * 4


def test_csv_logs_of_a_run_are_added_to(tmp_path):
    csv_logger = ["--config", str(REPO / "configs" / "logger" / "csv.yaml")]
    lintf(tmp_path, "fit", *csv_logger, "--trainer.max_steps", "2", *VALIDATE_EVERY_2)
    lintf(tmp_path, "test", *csv_logger, "--ckpt_path", "last")
    lintf(tmp_path, "fit", *csv_logger, "--trainer.max_steps", "4", *VALIDATE_EVERY_2, "--ckpt_path", "last")
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    assert run_directories(tmp_path) == ["copy-linear/version_0"]
    with open(run / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(row["step"]) for row in rows if row.get("train/loss")] == [0, 1, 2, 3]
    assert [int(row["step"]) for row in rows if row.get("val/loss")] == [1, 3]
    assert len([row for row in rows if row.get("test/loss")]) == 1


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    """W&B offline, its settings and caches under tmp_path, the working directory an empty folder."""
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name, folder in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / folder))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_wandb_files_go_under_the_root_and_a_test_continues_the_wandb_run(tmp_path, offline_wandb, capfd):
    import wandb

    root = tmp_path / "root"
    wandb_logger = ["--config", str(REPO / "configs" / "logger" / "wandb.yaml")]
    for subcommand, extra in (("fit", ["--trainer.max_steps", "2", *VALIDATE_EVERY_2]), ("test", ["--ckpt_path", "last"])):
        lintf(root, subcommand, *wandb_logger, *extra)
        wandb.finish()  # the command's process would end here
    (run,) = (root / "lightning_logs" / "lintf").iterdir()
    offline_runs = sorted((root / "lightning_logs" / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2 and all(path.name.endswith(f"-{run.name}") or path.name.endswith(f"-{run.name}-1")
                                          for path in offline_runs), offline_runs
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config-test.yaml", "config.yaml"]
    assert os.listdir(offline_wandb) == []  # nothing in the working directory
    err = capfd.readouterr().err
    assert "anonymous" not in err, err
