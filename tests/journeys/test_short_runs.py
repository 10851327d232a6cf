"""Short runs that make sense: the schedule follows ``--trainer.max_steps``, the run validates at its end,
Ctrl-C saves, and a finished run trains on with ``--ckpt_path last --trainer.max_steps`` beyond its end.

Each journey runs ``lintf`` on a tiny copy task under tmp_path as a user types it (copy.yaml's OneCycleLR is
sized for 6000 steps and validates every 500).
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from lightning.pytorch import Callback

from lintf.run.checkpoint_files import load_checkpoint_file
from lintf.run.cli import main
from tests.cli.helpers import REPO, tiny

SHORT = ["--trainer.val_check_interval", "4", "--trainer.limit_val_batches", "1"]


def lintf(tmp_path, *extra: str, subcommand: str = "fit") -> None:
    try:
        main(tiny(tmp_path, *extra, subcommand=subcommand))
    except SystemExit as error:
        pytest.fail(f"lintf {subcommand} exited with {error.code}")


def checkpoint(tmp_path, name: str) -> dict:
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    return load_checkpoint_file(run / "checkpoints" / f"{name}.ckpt")


def one_cycle_rates(total_steps: int, steps: int) -> list[float]:
    """The learning rates torch's own OneCycleLR gives copy.yaml's settings over ``steps`` steps."""
    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=0.003)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.003, total_steps=total_steps, pct_start=0.1)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates + [optimizer.param_groups[0]["lr"]]


def test_a_short_run_anneals_validates_at_its_end_and_says_so(tmp_path, capsys):
    lintf(tmp_path, "--trainer.max_steps", "6", *SHORT)
    out, err = capsys.readouterr()
    summary = re.search(r"^fit: 6 steps in ([0-9.]+) s, ([0-9]+) tokens/s \(validation included\); (.*)$", out, re.M)
    assert summary is not None, out
    assert float(summary[2]) > 0 and "val/loss" in summary[3] and "val/accuracy" in summary[3]
    assert "schedule follows trainer.max_steps: total_steps 6000 -> 6" in out
    assert "validating every 4 steps, this 6-step run also validates at its last step, 6" in out
    best, last = checkpoint(tmp_path, "best"), checkpoint(tmp_path, "last")
    assert best["global_step"] == last["global_step"] == 6  # validated (and saved best) at the last step
    final_rate = last["optimizer_states"][0]["param_groups"][0]["lr"]
    assert final_rate == pytest.approx(one_cycle_rates(6, 6)[-1])
    assert final_rate != pytest.approx(one_cycle_rates(6000, 6)[-1]), "the schedule still ran for 6000 steps"
    assert last["lr_schedulers"][0]["total_steps"] == 6


def test_a_schedule_set_apart_is_kept(tmp_path, capsys):
    lintf(tmp_path, "--trainer.max_steps", "4", "--model.lr_scheduler.init_args.total_steps", "40", *SHORT)
    assert "schedule follows" not in capsys.readouterr().out
    assert checkpoint(tmp_path, "last")["lr_schedulers"][0]["total_steps"] == 40


def test_a_finished_run_trains_longer_with_a_new_cycle(tmp_path, capsys):
    lintf(tmp_path, "--trainer.max_steps", "6", *SHORT)
    lintf(tmp_path, "--trainer.max_steps", "10", *SHORT, "--ckpt_path", "last")
    assert "schedule ends at step 6; training on to step 10 runs a new cycle of 4 steps" in capsys.readouterr().out
    last = checkpoint(tmp_path, "last")
    assert last["global_step"] == 10 and checkpoint(tmp_path, "best")["global_step"] == 10
    assert last["lr_schedulers"][0]["total_steps"] == 4 and last["lr_schedulers"][0]["last_epoch"] == 4
    moments = next(iter(last["optimizer_states"][0]["state"].values()))
    assert float(moments["step"]) == 10, "the optimizer state went on from the checkpoint's"
    runs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("lightning_logs/*/version_*"))
    assert runs == ["lightning_logs/copy-linear/version_0"]


LOGGED_RATES = ["--config", str(REPO / "configs" / "logger" / "csv.yaml"), "--trainer.callbacks+=LearningRateMonitor",
                "--trainer.callbacks.logging_interval", "step", "--trainer.callbacks.log_momentum", "true"]
"""CSV logs with the learning rate and momentum of every step, as a user adds them."""


def one_cycle_momenta(total_steps: int, steps: int) -> list[float]:
    """AdamW's first beta under torch's own OneCycleLR with copy.yaml's settings over ``steps`` steps."""
    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=0.003)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.003, total_steps=total_steps, pct_start=0.1)
    momenta = []
    for _ in range(steps):
        momenta.append(optimizer.param_groups[0]["betas"][0])
        optimizer.step()
        schedule.step()
    return momenta


def logged_rates(tmp_path) -> dict[int, tuple[float, float]]:
    """(learning rate, momentum) of each step, from the run's metrics.csv."""
    path = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "metrics.csv"
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    rates = {int(row["step"]): float(row["lr-AdamW"]) for row in rows if row.get("lr-AdamW")}
    momenta = {int(row["step"]): float(row["lr-AdamW-momentum"]) for row in rows if row.get("lr-AdamW-momentum")}
    return {step: (rates[step], momenta[step]) for step in rates}


def test_the_added_steps_run_the_rates_of_a_fresh_cycle_from_their_first(tmp_path, capsys):
    lintf(tmp_path, "--trainer.max_steps", "6", *SHORT, *LOGGED_RATES)
    lintf(tmp_path, "--trainer.max_steps", "10", *SHORT, *LOGGED_RATES, "--ckpt_path", "last")
    assert ("the learning rate rises again to 0.003 and anneals by step 10, as in a fresh run of 4 steps"
            in capsys.readouterr().out)
    rates = logged_rates(tmp_path)
    assert sorted(rates) == list(range(10))
    assert [rates[step][0] for step in range(6)] == pytest.approx(one_cycle_rates(6, 6)[:6])
    assert [rates[step][0] for step in range(6, 10)] == pytest.approx(one_cycle_rates(4, 4)[:4])
    assert [rates[step][1] for step in range(6, 10)] == pytest.approx(one_cycle_momenta(4, 4))


class CtrlCAt(Callback):
    """Sends this process SIGINT (the user's Ctrl-C) once ``step`` optimizer steps are done."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 3:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT to itself")
def test_ctrl_c_saves_says_how_to_continue_and_the_run_continues(tmp_path):
    args = tiny(tmp_path, "--trainer.max_steps", "8", "--trainer.val_check_interval", "8",
                "--trainer.limit_val_batches", "1")
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", *args,
                           "--trainer.callbacks+=tests.journeys.test_short_runs.CtrlCAt"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 128 + signal.SIGINT, done.stderr[-2000:]
    last = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    assert "Ctrl-C: stopping after this step and saving last.ckpt" in done.stderr
    assert f"stopped by SIGINT at step 3: saved {last}; continue with the same command and --ckpt_path last" \
        in done.stderr
    assert load_checkpoint_file(last)["global_step"] == 3
    main([*args, "--ckpt_path", "last"])
    assert load_checkpoint_file(last)["global_step"] == 8
