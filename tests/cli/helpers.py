"""Tiny-run helpers for CLI tests: every run writes under the test's tmp_path, in seconds."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from lightning.pytorch import Callback

from lintf.run.cli import LintfCLI

REPO = Path(__file__).resolve().parents[2]
COPY_YAML = str(REPO / "configs" / "copy.yaml")

TINY_MODEL = ["--model.encoder.d_model", "16", "--model.encoder.n_layers", "1", "--model.encoder.n_heads", "2"]
TINY_DATA = [
    "--data.max_length", "24", "--data.batch_size", "8", "--data.train_size", "64",
    "--data.val_size", "16", "--data.test_size", "16", "--data.predict_size", "16",
]


def quiet_trainer(root: Path) -> list[str]:
    return [
        "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.num_sanity_val_steps", "0",
        "--trainer.log_every_n_steps", "1", "--trainer.val_check_interval", "1.0",
    ]


def tiny(root: Path, *extra: str, subcommand: str = "fit", config: str = COPY_YAML) -> list[str]:
    """Arguments for a seconds-long copy run under ``root``; ``extra`` overrides anything."""
    return [subcommand, "--config", config, *TINY_MODEL, *TINY_DATA, *quiet_trainer(root), *extra]


def run(args: list[str], run_subcommand: bool = True) -> LintfCLI:
    if not run_subcommand:  # build the trainer only: drop the subcommand, as LightningCLI(run=False) expects
        args = args[1:]
    return LintfCLI(args=args, run=run_subcommand)


class RecordSteps(Callback):
    """Records (global_step, loss) of every training batch and the optimizer's step count."""

    def __init__(self) -> None:
        self.losses: list[tuple[int, float]] = []
        self.first_global_step: int | None = None
        self.first_optimizer_steps: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.first_global_step is None:
            self.first_global_step = trainer.global_step
            states = trainer.optimizers[0].state.values()
            self.first_optimizer_steps = max((float(s["step"]) for s in states), default=0.0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append((trainer.global_step, float(outputs["loss"])))


class InterruptAt(Callback):
    """Raises KeyboardInterrupt (a user's Ctrl-C) once ``step`` optimizer steps are done."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step:
            raise KeyboardInterrupt


class DumpWeights(Callback):
    """Each rank saves its final weights and losses to ``directory/rank<r>.pt`` (DDP tests)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, pl_module):
        state = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}
        record = {"state": state, "losses": self.losses, "world_size": trainer.world_size}
        torch.save(record, os.path.join(self.directory, f"rank{trainer.global_rank}.pt"))


def finite(values) -> bool:
    return all(math.isfinite(v) for v in values)
