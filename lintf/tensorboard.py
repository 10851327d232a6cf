"""Run directories claimed atomically, so runs started side by side in one directory never share one.

Lightning picks ``version_N`` as one past the highest existing directory, so two runs started
together both choose the same N and write their events, configs and checkpoints into one
directory. Here a version is reserved by creating its directory atomically (``mkdir`` fails if
another run got there first, and the next number is tried): by the default TensorBoard logger, and
for runs without a logger, whose checkpoints would otherwise all land in ``<root>/checkpoints``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

RUNS_DIRECTORY = "lightning_logs"


def reserve_version(parent: str, version: int = 0) -> int:
    """The first ``version >= version`` whose ``parent/version_N`` this call created (atomically)."""
    os.makedirs(parent, exist_ok=True)
    while True:
        try:
            os.mkdir(os.path.join(parent, f"version_{version}"))
            return version
        except FileExistsError:
            version += 1


def reserve_run_directory(root: str) -> str:
    """A new ``root/lightning_logs/version_N`` for a run without a logger, created by this call."""
    parent = os.path.join(root, RUNS_DIRECTORY)
    return os.path.join(parent, f"version_{reserve_version(parent)}")


class ReservedVersionTensorBoardLogger(TensorBoardLogger):
    """TensorBoardLogger whose automatic ``version_N`` directory is claimed atomically on rank 0.

    ``reserved_directory`` names the directory this process created (None until then), so a run that
    stops on a configuration error before writing a checkpoint can remove it again.
    """

    reserved_directory: str | None = None

    # Overrides TensorBoardLogger._get_next_version (private), which Lightning calls for ``version=None``
    # to pick one past the highest ``root_dir/version_*``; tests/cli/test_upstream_contracts.py checks it.
    def _get_next_version(self) -> int:
        version = super()._get_next_version()
        if rank_zero_only.rank != 0:  # other ranks receive rank 0's run directory by broadcast
            return version
        version = reserve_version(self.root_dir, version)  # root_dir: save_dir/name, where Lightning looks
        self.reserved_directory = os.path.join(self.root_dir, f"version_{version}")
        return version


def discard_unused_run_directory(directory: str | None) -> None:
    """Remove ``directory`` (a run directory this process reserved) if the run wrote no checkpoint into it."""
    if directory and os.path.isdir(directory) and not any(Path(directory).rglob("*.ckpt")):
        shutil.rmtree(directory, ignore_errors=True)
        parent = os.path.dirname(directory)
        if not os.listdir(parent):  # lightning_logs/ itself, if this run made it and nothing else is there
            os.rmdir(parent)
