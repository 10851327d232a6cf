"""The training progress bar: which run it is and, for a run of ``max_steps``, how far along in steps.

Lightning's bar shows ``v_num`` (the last characters of the logger's version) and counts batches per
epoch ("Epoch 29" for a 300-step run of a small dataset). lintf's names the run (``copy-linear/version_0``)
in its description instead and, when ``max_steps`` ends the run, one bar of optimizer steps (``step 120/300``);
a run of ``max_epochs`` keeps Lightning's epoch bar. Rich where it is installed, else tqdm, as Lightning
chooses.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, ProgressBar, RichProgressBar, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

from lintf.layout.directories import run_label


def run_label_of(trainer: Trainer) -> str | None:
    """``copy-linear/version_0`` for a run logged by TensorBoard or CSV; the first logger's version otherwise."""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    if isinstance(logger, TensorBoardLogger | CSVLogger):
        return run_label(logger.log_dir)
    version = logger.version
    return None if version in (None, "") else str(version)


class RunProgress:
    """Mixin for Lightning's progress bars: the run's label instead of ``v_num``; optimizer steps when
    ``max_steps`` ends the run."""

    label: str | None = None
    started = False
    trainer: Trainer

    def counts_steps(self) -> bool:
        """Whether the bar counts the run's optimizer steps (``max_steps`` is set) rather than an epoch's batches."""
        return self.trainer.max_steps > 0

    @property
    def total_train_batches(self) -> int | float:
        return self.trainer.max_steps if self.counts_steps() else super().total_train_batches  # type: ignore[misc]

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)  # type: ignore[misc]
        self.label, self.started = run_label_of(trainer), False

    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        if self.counts_steps() and self.started:
            return  # one bar for the whole run: its elapsed time and rate span the epochs
        super().on_train_epoch_start(trainer, *args)  # type: ignore[misc]
        self.started = True

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # Lightning's bars show batch_idx + 1 of total_train_batches: here the step reached, of max_steps.
        position = trainer.global_step - 1 if self.counts_steps() else batch_idx
        super().on_train_batch_end(trainer, pl_module, outputs, batch, position)  # type: ignore[misc]

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)  # type: ignore[misc]
        items.pop("v_num", None)  # the description names the run
        return items

    def description(self, epoch: str) -> str:
        """``copy-linear/version_0 step`` (a run of ``max_steps``) or ``copy-linear/version_0 <epoch>``."""
        counter = "step" if self.counts_steps() else epoch
        return f"{self.label} {counter}" if self.label else counter


class RunRichProgressBar(RunProgress, RichProgressBar):
    """Lightning's RichProgressBar, showing the run and, for a run of ``max_steps``, its steps."""

    # Overrides RichProgressBar._get_train_description (private), which says "Epoch N/M".
    def _get_train_description(self, current_epoch: int) -> str:
        description = self.description(super()._get_train_description(current_epoch).strip())
        return f"{description:{len(self.validation_description)}}"  # padded as Lightning pads, against flicker


class RunTQDMProgressBar(RunProgress, TQDMProgressBar):
    """Lightning's TQDMProgressBar, showing the run and, for a run of ``max_steps``, its steps."""

    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(self.description(f"Epoch {trainer.current_epoch}"))


def run_progress_bar() -> ProgressBar:
    """lintf's progress bar, Rich where it is installed (as Lightning's default), else tqdm."""
    return RunRichProgressBar() if _RICH_AVAILABLE else RunTQDMProgressBar()


def with_progress_bar(config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """``callbacks`` with lintf's progress bar, unless the run has none or configures its own.

    Args:
        config: the trainer's arguments (``enable_progress_bar``, ``barebones``, ``callbacks``).
        callbacks: the callbacks the command adds.
    """
    configured = config.get("callbacks") or []
    configured = configured if isinstance(configured, list | tuple) else [configured]
    if config.get("enable_progress_bar") is False or config.get("barebones"):
        return callbacks
    if any(isinstance(callback, ProgressBar) for callback in [*configured, *callbacks]):
        return callbacks
    return [*callbacks, run_progress_bar()]
