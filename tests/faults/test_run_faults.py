"""Runs that diverge, are stopped, cannot save, or would continue the wrong run: one paragraph, a non-zero exit
code, and nothing lost on disk."""

from __future__ import annotations

import errno
import math
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch
from lightning.pytorch import Callback

from lintf.run.checkpoint_files import load_checkpoint_file
from lintf.run.cli import main
from tests.cli.helpers import REPO, run, tiny
from tests.faults.test_cli_faults import lintf_error

VALIDATE_EVERY_2 = ["--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]
FIXED_LR = ["--model.lr_scheduler", "null"]


def failure(args: list[str], capsys, code: int = 1) -> str:
    """The one ``lintf:`` paragraph of a run that started and failed with exit ``code``."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("lintf:")]
    assert len(lines) == 1, err
    return lines[0]


def checkpoints(root) -> dict[str, dict]:
    return {path.name: load_checkpoint_file(path) for path in root.rglob("*.ckpt")}


def all_finite(checkpoint: dict) -> bool:
    return all(bool(torch.isfinite(value).all()) for value in checkpoint["state_dict"].values())


# Diverging runs -------------------------------------------------------------------------------------------------

def test_huge_learning_rate_stops_at_the_step_and_saves_nothing_non_finite(tmp_path, capsys):
    err = failure(tiny(tmp_path, *FIXED_LR, "--model.optimizer.lr", "1e6", "--trainer.max_steps", "40",
                       *VALIDATE_EVERY_2), capsys)
    assert "training diverged at step 2 (epoch 0, batch 1) at learning rate 1e+06: the training loss is nan" in err
    assert "no checkpoint was written" in err and "gradient_clip_val" in err
    assert not list(tmp_path.rglob("*.ckpt"))


class PoisonGradient(Callback):
    """Makes one gradient infinite after the third backward pass (a finite loss with a broken gradient)."""

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == 2:
            next(pl_module.parameters()).grad.fill_(float("inf"))


def test_infinite_gradient_stops_before_the_optimizer_step(tmp_path, capsys):
    err = failure(tiny(tmp_path, "--trainer.max_steps", "6", *VALIDATE_EVERY_2,
                       "--trainer.callbacks+=tests.faults.test_run_faults.PoisonGradient"), capsys)
    last = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    assert "training diverged at step 3" in err and "the gradient of" in err and "is not finite" in err
    assert f"{last} holds the last finite state" in err
    saved = checkpoints(tmp_path)
    assert saved["last.ckpt"]["global_step"] == 2 and all(all_finite(checkpoint) for checkpoint in saved.values())


class InfiniteValidation(Callback):
    """Makes the model's output infinite during the second validation only (its weights stay finite)."""

    def on_validation_epoch_start(self, trainer, pl_module):
        self.saved = None
        if trainer.global_step >= 4:
            weight = next(pl_module.parameters())
            self.saved = weight.detach().clone()
            weight.data.fill_(float("inf"))

    def on_validation_epoch_end(self, trainer, pl_module):
        if self.saved is not None:
            next(pl_module.parameters()).data.copy_(self.saved)


def test_non_finite_validation_loss_is_never_saved_as_best(tmp_path, capsys):
    err = failure(tiny(tmp_path, "--trainer.max_steps", "6", *VALIDATE_EVERY_2,
                       "--trainer.callbacks+=tests.faults.test_run_faults.InfiniteValidation"), capsys)
    assert "training diverged at the validation after step 4" in err and "the validation's val/loss is nan" in err
    saved = checkpoints(tmp_path)
    assert saved["best.ckpt"]["global_step"] == 2 and saved["last.ckpt"]["global_step"] == 2


# Stopped runs ---------------------------------------------------------------------------------------------------

class TerminateAt(Callback):
    """Sends this process SIGTERM (a scheduler's preemption) when ``step`` optimizer steps are done."""

    def __init__(self, step: int = 3) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_saves_a_resumable_checkpoint_and_exits_non_zero(tmp_path):
    args = tiny(tmp_path, "--trainer.max_steps", "8", "--trainer.val_check_interval", "8",
                "--trainer.limit_val_batches", "1")
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", *args,
                           "--trainer.callbacks+=tests.faults.test_run_faults.TerminateAt"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 143, done.stderr[-2000:]
    last = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    assert f"stopped by SIGTERM at step 3: saved {last}" in done.stderr
    assert load_checkpoint_file(last)["global_step"] == 3
    resumed = run([*args, "--ckpt_path", "last"])
    assert resumed.trainer.global_step == 8


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_start_removes_temporaries_of_killed_saves_only(tmp_path, capsys):
    directory = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints"
    directory.mkdir(parents=True)
    host = socket.gethostname()
    stale = [directory / f".last.ckpt.tmp-{host}-{dead_pid()}", directory / f".best.ckpt.{dead_pid()}.tmp",
             directory / ".last.ckpt.tmp-elsewhere-12"]
    alive = [directory / f".last.ckpt.tmp-{host}-{os.getppid()}", directory / ".best.ckpt.tmp-elsewhere-13"]
    for path in stale + alive:
        path.write_bytes(b"\0" * (1 << 20))
    os.utime(stale[2], (1_000, 1_000))  # another machine's, two days old
    run(tiny(tmp_path, "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0"))
    err = capsys.readouterr().err
    assert all(not path.exists() for path in stale) and all(path.exists() for path in alive)
    assert all(f"removed {path} (1.0 MB)" in err for path in stale)


@pytest.mark.parametrize("code,expected", [(errno.ENOSPC, "no space left on the device of"),
                                           (errno.EROFS, "is not writable (Read-only file system)")])
def test_failed_save_leaves_earlier_checkpoints_and_no_temporary(code, expected, tmp_path, capsys, monkeypatch):
    import lintf.run.checkpoint_files as checkpoint_files

    saves, real_save = [], torch.save

    def save_until_full(obj, file, *args, **kwargs):
        saves.append(file)
        if len(saves) > 2:  # best.ckpt and last.ckpt of the first validation, then the disk is full
            file.write(b"partial")
            raise OSError(code, os.strerror(code))
        return real_save(obj, file, *args, **kwargs)

    monkeypatch.setattr(checkpoint_files.torch, "save", save_until_full)
    err = failure(tiny(tmp_path, "--trainer.max_steps", "6", *VALIDATE_EVERY_2, *FIXED_LR,
                       "--model.optimizer.lr", "0.01"), capsys)
    assert "could not write checkpoint" in err and expected in err and "--ckpt_path last" in err
    directory = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints"
    assert sorted(p.name for p in directory.iterdir()) == ["best.ckpt", "best.ckpt.sha256", "last.ckpt",
                                                         "last.ckpt.sha256"]
    assert load_checkpoint_file(directory / "last.ckpt")["global_step"] == 2  # verified: digest intact


# The wrong run --------------------------------------------------------------------------------------------------

def test_last_means_the_last_checkpoint_of_this_experiment(tmp_path):
    mine = tiny(tmp_path, "--trainer.max_steps", "2", *VALIDATE_EVERY_2)
    run(mine)
    run(tiny(tmp_path, "--trainer.max_steps", "2", *VALIDATE_EVERY_2, "--model.encoder.attention", "softmax",
             "--model.encoder.d_model", "24"))  # another experiment, newer, in the same directory
    resumed = run([*mine[:-4], "--trainer.max_steps", "4", *VALIDATE_EVERY_2, "--ckpt_path", "last"])
    assert resumed.config.fit.ckpt_path == str(tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt")
    assert resumed.trainer.global_step == 4 and resumed.model.encoder_config.attention == "linear"


def test_resume_with_other_model_settings_is_refused(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", *VALIDATE_EVERY_2))
    path = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    err = lintf_error(tiny(tmp_path, "--trainer.max_steps", "4", "--model.encoder.attention", "softmax",
                           "--ckpt_path", str(path)), capsys)
    assert f"resuming from {path}" in err and "encoder.attention: checkpoint 'linear', this config 'softmax'" in err
    assert not (tmp_path / "lightning_logs" / "copy-linear" / "version_1").exists()


def test_predict_says_which_settings_the_checkpoint_overrides(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", *VALIDATE_EVERY_2))
    path = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    cli = run(tiny(tmp_path, "--model.encoder.dropout", "0.3", "--ckpt_path", str(path), subcommand="predict"))
    err = capsys.readouterr().err
    assert f"the model is built as checkpoint {path} was trained; ignoring this config's encoder.dropout: " \
           "checkpoint 0.0, this config 0.3" in err
    assert cli.model.encoder_config.dropout == 0.0


def test_runs_without_a_logger_keep_their_checkpoints_apart(tmp_path):
    for lr in ("0.01", "0.02"):
        run(tiny(tmp_path, "--trainer.logger", "false", "--trainer.callbacks", "[]", "--trainer.max_steps", "2",
                 *VALIDATE_EVERY_2, *FIXED_LR, "--model.optimizer.lr", lr))
    runs = tmp_path / "lightning_logs"
    rates = [load_checkpoint_file(runs / "copy-linear" / f"version_{n}" / "checkpoints" / "last.ckpt")["optimizer_states"][0]
             ["param_groups"][0]["lr"] for n in (0, 1)]
    assert rates == [0.01, 0.02] and not (tmp_path / "checkpoints").exists()


# Checks that come before the run --------------------------------------------------------------------------------

def test_epoch_bounded_run_longer_than_its_schedule_stops_before_training(tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--trainer.max_steps", "-1", "--trainer.max_epochs", "1",
                           "--model.lr_scheduler.init_args.total_steps", "5"), capsys)
    assert "OneCycleLR has total_steps=5, but trainer.max_epochs=1 makes 8 optimizer steps" in err
    assert not list(tmp_path.rglob("version_*"))


@pytest.mark.parametrize("value", ["-5", "-2"])
def test_negative_max_steps_is_one_paragraph(value, tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--trainer.max_steps", value), capsys)
    assert f"`max_steps` must be a non-negative integer or -1 (infinite steps). You passed in {value}." in err


@pytest.mark.parametrize(("name", "value"), [("LINTF_CPU_OUTPUT_CACHE_MB", "lots"), ("LINTF_CPU_PATH", "avx3")])
def test_bad_op_setting_stops_lintf_before_any_work(name, value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    err = lintf_error(tiny(tmp_path), capsys)
    assert f"{name}={value!r} is not valid" in err and not list(tmp_path.iterdir())
