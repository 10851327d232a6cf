"""Checkpoint files that are written whole and checked when read.

Every checkpoint is written to a temporary file and renamed into place (a run killed while saving
never leaves a half-written ``last.ckpt``), with a ``<file>.sha256`` sidecar holding the digest of
its bytes. Reading verifies the digest when the sidecar exists, so a copy cut short or a flipped bit
inside a tensor is reported instead of loading silently wrong weights.

``load_checkpoint_file`` is the one place lintf reads a checkpoint: the digest first, then
``torch.load(weights_only=True)``, which rebuilds tensors and plain data but never imports or calls
anything named in the file. The digest detects corruption, not tampering: whoever can replace the
file can replace its sidecar too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

SIDECAR_SUFFIX = ".sha256"
CHUNK_BYTES = 1 << 22


class CheckpointFileError(ValueError):
    """A checkpoint file that cannot be used: unreadable, not a checkpoint, or damaged."""


class CheckpointIntegrityError(CheckpointFileError):
    """A checkpoint whose bytes no longer match the digest recorded when it was written."""


def sidecar_of(path: str | Path) -> Path:
    return Path(f"{path}{SIDECAR_SUFFIX}")


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def verify_checkpoint(path: str | Path) -> None:
    """CheckpointIntegrityError naming ``path`` if its sidecar digest exists and does not match."""
    sidecar = sidecar_of(path)
    if not sidecar.is_file():
        return
    recorded = sidecar.read_text().split()[0] if sidecar.read_text().strip() else ""
    actual = file_sha256(path)
    if actual != recorded:
        raise CheckpointIntegrityError(
            f"checkpoint {path} does not match the sha256 recorded when it was written ({sidecar}): its bytes "
            "changed since (a copy cut short, a disk error). Use another checkpoint of the run, e.g. best.ckpt "
            "or last.ckpt, or a backup copy."
        )


def load_checkpoint_file(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """The checkpoint dict at ``path``, its sha256 verified, loaded without running code from it.

    Args:
        path: a ``.ckpt`` file.
        map_location: where tensors go (``torch.load``'s argument).
        mmap: map tensors from the file instead of reading them (for a look at the metadata).

    Raises:
        CheckpointIntegrityError: the bytes do not match the recorded digest.
        CheckpointFileError: the file cannot be read, or holds something other than a checkpoint's plain
            data and tensors (an object whose loading would run code).
    """
    verify_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for a bad file
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointFileError(
            f"cannot read checkpoint {path}: {type(error).__name__}: {reason}. lintf reads checkpoints with "
            "torch.load(weights_only=True): tensors and plain data only, never objects whose loading runs code."
        ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointFileError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint (a dict with "
                                  "state_dict and hyper_parameters)")
    return checkpoint


class VerifiedCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO``, writing atomically with a sha256 sidecar and verifying it on load."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        super().save_checkpoint(checkpoint, temporary, storage_options)
        digest = file_sha256(temporary)
        sidecar_of(path).unlink(missing_ok=True)  # never a stale digest beside a new file
        os.replace(temporary, path)
        write_atomically(sidecar_of(path), f"{digest}  {path.name}\n")

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> dict:
        """``load_checkpoint_file``: whatever Lightning asks, nothing in a checkpoint runs code."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return load_checkpoint_file(path, map_location=map_location if map_location is not None else "cpu")

    def remove_checkpoint(self, path: str | Path) -> None:
        super().remove_checkpoint(path)
        sidecar_of(path).unlink(missing_ok=True)
