"""Faults met by the CLI: each ends in one paragraph and exit code 2, with no run directory left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from lintf.run.cli import main
from tests.cli.helpers import COPY_YAML, REPO, run, tiny


def lintf_error(args: list[str], capsys) -> str:
    """The one ``lintf ...: error:`` paragraph of a failed command (exit 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("lintf")]
    assert len(lines) == 1, err
    return lines[0]


def no_run_directory(root) -> bool:
    return not list(root.rglob("version_*")) and not list(root.rglob("*.ckpt"))


@pytest.mark.parametrize("content,expected", [
    (b"model:\n\tinit_args: {}\n", "YAML indents with spaces, never tabs"),
    (b"model: {init_args: [1, 2\n", "is not valid YAML"),
    (b"model: caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 10)"),
    (b"- just\n- a list\n", "holds a list, not a mapping of options"),
])
def test_unreadable_config_file(content, expected, tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_bytes(content)
    err = lintf_error(["fit", "--config", COPY_YAML, "--config", str(config), "--trainer.default_root_dir",
                       str(tmp_path)], capsys)
    assert str(config) in err and expected in err
    assert no_run_directory(tmp_path)


def test_bad_plugins_value(tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--plugins", "[oops,"), capsys)
    assert "--plugins '[oops,' is not a YAML list" in err and no_run_directory(tmp_path)


def test_data_error_after_parsing_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = lintf_error(["fit", "--config", str(REPO / "configs" / "mnist_cpu.yaml"), "--data.init_args.source_dir",
                       str(tmp_path / "missing"), "--trainer.default_root_dir", str(tmp_path)], capsys)
    assert "no train-images-idx3-ubyte" in err and str(tmp_path / "missing") in err
    assert no_run_directory(tmp_path) and not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("value", ["0", "-4"])
def test_feed_forward_size_below_one_is_refused(value, tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--model.encoder.d_ff", value), capsys)
    assert f"d_ff must be >= 1, or null for 4 * d_model (64); got {value}" in err and no_run_directory(tmp_path)


def test_invalid_learning_rate_stops_before_training(tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--model.optimizer.lr", "-1"), capsys)
    assert "model.optimizer" in err and "Invalid learning rate: -1.0" in err and no_run_directory(tmp_path)
    err = lintf_error(tiny(tmp_path, "--model.lr_scheduler.init_args.total_steps", "10"), capsys)
    assert "cannot be built" in err and "ZeroDivisionError" in err  # OneCycleLR's warm-up of 0 steps


def test_schedule_shorter_than_max_steps_stops_before_training(tmp_path, capsys):
    # a schedule set apart on the command line is kept (else it follows --trainer.max_steps)
    err = lintf_error(tiny(tmp_path, "--trainer.max_steps", "7000", "--model.lr_scheduler.init_args.total_steps",
                           "6000"), capsys)
    assert "OneCycleLR has total_steps=6000, but trainer.max_steps=7000" in err and "step 6001" in err
    assert no_run_directory(tmp_path)


def test_resume_with_another_schedule_is_refused(tmp_path, capsys):
    short = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]
    run(tiny(tmp_path, *short, "--model.lr_scheduler.init_args.total_steps", "40"))
    runs_before = sorted(str(p) for p in (tmp_path / "lightning_logs").glob("*/version_*"))
    err = lintf_error(tiny(tmp_path, "--trainer.max_steps", "80", "--model.lr_scheduler.init_args.total_steps", "80",
                           "--ckpt_path", "last"), capsys)
    assert "resuming from" in err and "lr_scheduler.total_steps: checkpoint 40, this config 80" in err
    assert sorted(str(p) for p in (tmp_path / "lightning_logs").glob("*/version_*")) == runs_before
    resumed = run(tiny(tmp_path, "--trainer.max_steps", "4", "--model.lr_scheduler.init_args.total_steps", "40",
                       "--trainer.limit_val_batches", "1", "--ckpt_path", "last"))
    assert resumed.trainer.global_step == 4  # the same settings resume


def test_resume_with_other_data_settings_names_the_mismatch(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    err = lintf_error(tiny(tmp_path, "--data.n_symbols", "20", "--ckpt_path", "last", subcommand="predict"), capsys)
    assert "does not fit this model" in err and "token_embedding.weight" in err and "config.yaml" in err


def test_whole_batch_limit_is_saved_as_a_whole_number(tmp_path):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    saved = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "config.yaml"
    assert yaml.safe_load(saved.read_text())["trainer"]["limit_val_batches"] == 1
    again = run(["fit", "--config", str(saved), "--trainer.max_steps", "1"])
    assert again.trainer.limit_val_batches == 1 and isinstance(again.trainer.limit_val_batches, int)


def test_fit_says_where_the_run_went(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    out = capsys.readouterr().out
    assert f"run directory: {tmp_path / 'lightning_logs' / 'copy-linear' / 'version_0'}" in out
    assert f"best checkpoint: {tmp_path / 'lightning_logs' / 'copy-linear' / 'version_0' / 'checkpoints' / 'best.ckpt'}" in out


def test_debug_keeps_the_traceback(tmp_path):
    env = {**os.environ, "LINTF_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", *tiny(tmp_path, "--model.optimizer.lr", "-1")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode != 0 and "Traceback" in done.stderr and "Invalid learning rate" in done.stderr
