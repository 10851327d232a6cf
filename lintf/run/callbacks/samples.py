"""Log a few model samples (copy predictions as a table; later, images) each validation."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows])


class LogSamples(Callback):
    """After the first batch of the first validation loader, log ``pl_module.sample_table(batch, n)`` to the loggers.

    W&B gets a table, TensorBoard a markdown text; other loggers and tasks without
    ``sample_table`` are skipped.

    Args:
        n: sequences per table.
    """

    def __init__(self, n: int = 8) -> None:
        self.n = n

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if batch_idx != 0 or dataloader_idx != 0 or trainer.sanity_checking or not trainer.is_global_zero or not hasattr(pl_module, "sample_table"):
            return
        loggers = [lg for lg in trainer.loggers if isinstance(lg, (WandbLogger, TensorBoardLogger))]
        if not loggers:
            return
        columns, rows = pl_module.sample_table(batch, self.n)
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                logger.log_text("samples", columns=columns, data=rows, step=trainer.global_step)
            else:
                logger.experiment.add_text("samples", markdown_table(columns, rows), trainer.global_step)
