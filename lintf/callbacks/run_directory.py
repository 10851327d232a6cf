"""Where a run's files go: one directory per run, shared by its config, logs and checkpoints."""

from __future__ import annotations

import os

from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger


def run_directory(trainer: Trainer) -> str:
    """``save_dir/name/version`` of the first logger, the directory ModelCheckpoint also uses.

    Without a logger it is ``default_root_dir``. Call on every rank (it broadcasts rank 0's answer).
    """
    path = trainer.default_root_dir
    if trainer.loggers:
        logger = trainer.loggers[0]
        if isinstance(logger, (TensorBoardLogger, CSVLogger)):
            path = logger.log_dir
        else:
            if isinstance(logger, WandbLogger) and trainer.is_global_zero:
                logger.experiment  # noqa: B018  (creates the run, which fixes its id = version)
            version = logger.version
            version = version if isinstance(version, str) else f"version_{version}"
            path = os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name or ""), version)
    return trainer.strategy.broadcast(path)


def unused_path(path: str) -> str:
    """``path`` if free, else ``stem-1.ext``, ``stem-2.ext``, ...: files of earlier runs survive."""
    stem, extension = os.path.splitext(path)
    candidate, index = path, 0
    while os.path.exists(candidate):
        index += 1
        candidate = f"{stem}-{index}{extension}"
    return candidate
