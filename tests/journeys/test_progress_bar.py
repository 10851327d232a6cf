"""The progress bar names the run and, for a run of ``max_steps``, counts its steps: ``copy-linear/version_0 step
... 5/5``, not ``Epoch 2`` and ``v_num``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from lightning.pytorch.callbacks import TQDMProgressBar

from lintf.run.callbacks import progress_bar
from lintf.run.cli import main
from tests.cli.helpers import REPO, run, tiny

BAR = ["--trainer.enable_progress_bar", "true", "--trainer.limit_val_batches", "1"]


def test_the_bar_of_a_step_run_names_the_run_and_counts_steps(tmp_path):
    # 8 batches an epoch (train_size 64, batch_size 8): 20 steps are 2.5 epochs
    args = tiny(tmp_path, *BAR, "--trainer.max_steps", "20", "--trainer.val_check_interval", "8")
    done = subprocess.run([sys.executable, "-m", "lintf_cli", *args], check=False, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "copy-linear/version_0 step" in printed and "20/20" in printed, printed
    assert "v_num" not in printed and "Epoch" not in printed


def test_the_tqdm_bar_too_and_an_epoch_run_keeps_its_epochs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress_bar, "_RICH_AVAILABLE", False)
    main(tiny(tmp_path, *BAR, "--trainer.max_steps", "10"))
    err = "".join(capsys.readouterr())  # Lightning's tqdm bars write to stdout
    assert "copy-linear/version_0 step" in err and "10/10" in err and "v_num" not in err, err
    main(tiny(tmp_path, *BAR, "--trainer.max_steps", "-1", "--trainer.max_epochs", "2"))
    err = "".join(capsys.readouterr())
    assert "copy-linear/version_1 Epoch 1" in err and "8/8" in err and "v_num" not in err, err


def test_a_progress_bar_of_ones_own_is_kept(tmp_path):
    cli = run(tiny(tmp_path, "--trainer.callbacks+", "lightning.pytorch.callbacks.TQDMProgressBar",
                   "--trainer.enable_progress_bar", "true"), run_subcommand=False)
    assert type(cli.trainer.progress_bar_callback) is TQDMProgressBar
    assert isinstance(run(tiny(tmp_path, "--trainer.enable_progress_bar", "true"), run_subcommand=False)
                      .trainer.progress_bar_callback, progress_bar.RunProgress)
