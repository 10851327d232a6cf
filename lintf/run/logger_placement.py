"""Where a command's loggers write: under the run root, or into the run its checkpoint came from.

A command without ``--ckpt_path`` starts a new run directory under ``--trainer.default_root_dir``, named
after what the run is (``<root>/lightning_logs/copy-linear/version_N``, ``lintf.layout.run_names``;
lintf's CSV and W&B loggers that name no ``save_dir`` put their files there too; a TensorBoard or CSV
logger given a ``name`` or ``version`` of its own keeps it). A command given the checkpoint of a run
(``<run>/checkpoints/*.ckpt``) continues that run: ``fit`` resumes its curves and checkpoints,
``validate``, ``test`` and ``predict`` add their metrics, predictions and samples to it. TensorBoard and
CSV loggers write into the run directory (a resumed fit drops the TensorBoard events logged after its
checkpoint, so the curves continue without overlap); a first W&B logger resumes the W&B run whose id
names the directory. A checkpoint from elsewhere, or a run directory this process may not write, gets a
new run directory.

The trainer's ``logger`` is changed in the parsed configuration, before any logger is built, so the
config a run saves records where it logged.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.plugins.environments import SLURMEnvironment

from lintf.layout.directories import RUNS_DIRECTORY, run_directory_of, runs_of, split_run_directory
from lintf.names import import_class
from lintf.run.loggers import CSVLogger, ReservedVersionTensorBoardLogger, WandbLogger


def logger_entries(logger: Any) -> list[Namespace]:
    """The ``class_path`` entries of a parsed ``trainer.logger`` (None, a bool, one entry or a list)."""
    entries = logger if isinstance(logger, list) else [logger]
    return [entry for entry in entries if isinstance(entry, Namespace) and entry.get("class_path")]


def set_arguments(entry: Namespace, **values: Any) -> None:
    """Set ``init_args`` of a ``class_path`` entry."""
    for key, value in values.items():
        entry.init_args[key] = value


def place_under_root(logger: Any, root: str | None, name: str | None = None) -> None:
    """Give lintf's CSV and W&B loggers that name no ``save_dir`` the run root, where TensorBoard writes, and
    TensorBoard and CSV loggers that name no run (the default ``name``, no ``version``) the run's ``name``.

    Args:
        logger: the parsed ``trainer.logger``, changed in place.
        root: ``trainer.default_root_dir``; None leaves them in the working directory.
        name: the run's name (``lintf.layout.run_names.run_name``); None keeps ``lightning_logs/version_N``.
    """
    for entry in logger_entries(logger):
        cls = import_class(entry.class_path)
        unnamed = entry.init_args.get("name") in (None, RUNS_DIRECTORY) and entry.init_args.get("version") is None
        if name and unnamed and issubclass(cls, (TensorBoardLogger, LightningCSVLogger)):
            entry.init_args.name = runs_of(name)
        if root is None:
            continue
        if entry.init_args.get("save_dir") is None and issubclass(cls, WandbLogger):
            entry.init_args.save_dir = os.path.join(root, RUNS_DIRECTORY)
        elif entry.init_args.get("save_dir") is None and issubclass(cls, CSVLogger):
            entry.init_args.save_dir = root


def run_to_continue(checkpoint_path: str) -> str | None:
    """The run directory a command given ``checkpoint_path`` writes into; None: a new one.

    A run directory this process may not write (another user's, a read-only copy) is left alone,
    with a notice.
    """
    directory = run_directory_of(checkpoint_path)
    if directory is not None and not os.access(directory, os.W_OK | os.X_OK):
        print(f"lintf: cannot write into {directory}, the run of {checkpoint_path}; this run gets a directory of its "
              "own", file=sys.stderr, flush=True)
        return None
    return directory


def continue_in(logger: Any, directory: str, resumed_step: int | None) -> None:
    """Make the parsed ``trainer.logger`` write into the existing run ``directory``.

    Args:
        logger: the parsed ``trainer.logger``, changed in place (the default logger is ``default_logger``'s).
        directory: the run directory.
        resumed_step: the checkpoint's global step when ``fit`` resumes it (TensorBoard drops later events), else None.
    """
    save_dir, name, version = split_run_directory(directory)
    for index, entry in enumerate(logger_entries(logger)):
        cls = import_class(entry.class_path)
        if cls is LightningCSVLogger:  # Lightning's deletes the metrics.csv it finds; lintf's adds to it
            entry.class_path = f"{CSVLogger.__module__}.{CSVLogger.__qualname__}"
        if issubclass(cls, (TensorBoardLogger, LightningCSVLogger)):
            set_arguments(entry, save_dir=save_dir, name=name, version=version)
            if issubclass(cls, TensorBoardLogger) and resumed_step is not None:
                entry.init_args.purge_step = resumed_step
        elif issubclass(cls, LightningWandbLogger) and index == 0:  # its run directory is save_dir/project/<run id>
            set_arguments(entry, save_dir=save_dir, project=name, id=version, version=None)


def default_logger(root: str, directory: str | None, resumed_step: int | None, name: str | None = None) -> Logger:
    """The logger of a run that configures none: TensorBoard (CSV without tensorboard installed).

    Args:
        root: ``trainer.default_root_dir`` (or the working directory), where a new run directory is reserved.
        directory: the existing run directory to write into, or None for a new one.
        resumed_step: as for ``continue_in``.
        name: the run's name: a new run goes to ``root/lightning_logs/<name>/version_N``.
    """
    has_tensorboard = importlib.util.find_spec("tensorboard") is not None
    if directory is None:
        location: dict[str, Any] = {"save_dir": os.path.abspath(root), "name": runs_of(name),
                                    "version": SLURMEnvironment.job_id()}
    else:
        save_dir, name, version = split_run_directory(directory)
        location = {"save_dir": save_dir, "name": name, "version": version}
    if not has_tensorboard:
        return CSVLogger(**location)
    purge = {"purge_step": resumed_step} if directory is not None and resumed_step is not None else {}
    return ReservedVersionTensorBoardLogger(**location, **purge)
