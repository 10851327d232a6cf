"""Run directories: one per experiment, shared by its config, logs, checkpoints, predictions and samples.

``run_directory(trainer)`` is where a run's files go (its first logger's ``save_dir/name/version``). A
new run gets a new one, ``<root>/lightning_logs/<run name>/version_N``, its name saying what the run is
(``run_names``: ``copy-linear``, ``stream_lm-gated_delta_net+local-mytext``), a counter per name.
Lightning picks ``version_N`` as one past the highest existing directory, so two runs started together
both choose the same N and write their events, configs and checkpoints into one directory. Here a version
is reserved by creating its directory atomically (``mkdir`` fails if another run got there first, and the
next number is tried): by the default TensorBoard logger and lintf's CSV logger (``lintf.run.loggers``),
and for runs without a logger, whose checkpoints would otherwise all land in ``<root>/checkpoints``. A
run that stops before it trained or saved gives its directory back.

A command given the checkpoint of a run (``<run>/checkpoints/*.ckpt``, ``run_directory_of``) writes
into that run instead (``lintf.run.logger_placement``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

RUNS_DIRECTORY = "lightning_logs"
CHECKPOINTS_DIRECTORY = "checkpoints"
CONFIG_FILE = "config.yaml"


def reserve_version(parent: str, version: int = 0) -> int:
    """The first ``version >= version`` whose ``parent/version_N`` this call created (atomically)."""
    os.makedirs(parent, exist_ok=True)
    while True:
        try:
            os.mkdir(os.path.join(parent, f"version_{version}"))
            return version
        except FileExistsError:
            version += 1


def runs_of(name: str | None) -> str:
    """The folder under the run root that holds the runs called ``name``: ``lightning_logs/<name>``."""
    return os.path.join(RUNS_DIRECTORY, name) if name else RUNS_DIRECTORY


def reserve_run_directory(root: str, name: str | None = None) -> str:
    """A new ``root/lightning_logs/<name>/version_N`` for a run without a logger, created by this call."""
    parent = os.path.join(root, runs_of(name))
    return os.path.join(parent, f"version_{reserve_version(parent)}")


def discard_unused_run_directory(directory: str | None) -> None:
    """Remove ``directory`` (a run directory this process reserved) if the run wrote no checkpoint into it,
    and the folders above it up to ``lightning_logs/`` that it leaves empty."""
    if directory and os.path.isdir(directory) and not any(Path(directory).rglob("*.ckpt")):
        shutil.rmtree(directory, ignore_errors=True)
        parent = os.path.dirname(os.path.abspath(directory))
        while os.path.isdir(parent) and not os.listdir(parent) and RUNS_DIRECTORY in (
                os.path.basename(parent), os.path.basename(os.path.dirname(parent))):
            os.rmdir(parent)  # <name>/, then lightning_logs/ itself, if this run made them and nothing else is there
            parent = os.path.dirname(parent)


def run_directory(trainer: Trainer) -> str:
    """``save_dir/name/version`` of the first logger, the directory ModelCheckpoint also uses, as an absolute path.

    Without a logger it is ``default_root_dir``. Call on every rank (it broadcasts rank 0's answer).
    """
    return trainer.strategy.broadcast(own_run_directory(trainer))


def own_run_directory(trainer: Trainer) -> str:
    """``run_directory`` as this process sees it, without asking the other ranks: for code that runs on rank 0
    only (on rank 0 it is the run's directory)."""
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
    return os.path.abspath(path)


def run_directory_of(checkpoint_path: str) -> str | None:
    """The run directory that holds ``checkpoint_path``, as an absolute path; None for a checkpoint outside any run.

    A run directory holds the checkpoint in its ``checkpoints/`` folder and the run's ``config.yaml``
    (every lintf run saves one). A checkpoint anywhere else (a file someone sent, a folder that merely
    happens to be called ``checkpoints``) belongs to no run. Whether the directory may be written is
    not checked.

    Args:
        checkpoint_path: path of a ``.ckpt`` file.
    """
    checkpoints = os.path.dirname(os.path.abspath(checkpoint_path))
    run = os.path.dirname(checkpoints)
    if os.path.basename(checkpoints) == CHECKPOINTS_DIRECTORY and os.path.isfile(os.path.join(run, CONFIG_FILE)):
        return run
    return None


def split_run_directory(directory: str) -> tuple[str, str, str]:
    """``(save_dir, name, version)`` of a logger whose run directory (``save_dir/name/version``) is ``directory``."""
    parent = os.path.dirname(os.path.abspath(directory))
    return os.path.dirname(parent), os.path.basename(parent), os.path.basename(os.path.abspath(directory))


def run_label(directory: str) -> str:
    """A run's short name: ``copy-linear/version_3`` for ``lightning_logs/copy-linear/version_3``; else the
    directory's own name (``version_3`` in the older layout ``lightning_logs/version_3``)."""
    parent = os.path.dirname(os.path.abspath(directory))
    own = os.path.basename(os.path.abspath(directory))
    named = os.path.basename(os.path.dirname(parent)) == RUNS_DIRECTORY
    return f"{os.path.basename(parent)}/{own}" if named else own


def unused_path(path: str) -> str:
    """``path`` if free, else ``stem-1.ext``, ``stem-2.ext``, ...: files of earlier runs survive."""
    stem, extension = os.path.splitext(path)
    candidate, index = path, 0
    while os.path.exists(candidate):
        index += 1
        candidate = f"{stem}-{index}{extension}"
    return candidate
