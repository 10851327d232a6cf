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

import errno
import hashlib
import os
import pickle
import re
import shutil
import socket
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lintf.run.checkpoint_damage import damage_of

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


TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<host>.+)-(?P<pid>\d+)$")
OLD_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")  # written by earlier lintf versions
FOREIGN_TEMPORARY_AGE_S = 24 * 3600.0
"""A temporary of another machine (a shared file system) is stale only after a day: its writer may be alive."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written (no space, a read-only or forbidden directory); one paragraph."""


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place: hidden, naming this machine and process."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def write_atomically(path: Path, text: str) -> None:
    temporary = temporary_path(path)
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def is_stale_temporary(path: Path) -> bool:
    """Whether ``path`` is a temporary checkpoint file whose writer is gone (killed, or its machine down)."""
    match = TEMPORARY.match(path.name) or OLD_TEMPORARY.match(path.name)
    if match is None:
        return False
    host = match.groupdict().get("host", socket.gethostname())
    if host != socket.gethostname():
        return time.time() - path.stat().st_mtime > FOREIGN_TEMPORARY_AGE_S
    return int(match["pid"]) != os.getpid() and not process_alive(int(match["pid"]))


def remove_stale_temporaries(roots: list[str]) -> list[tuple[Path, int]]:
    """Delete the temporaries that killed saves left in the run directories below ``roots``.

    A save killed by SIGKILL (or one that failed without cleaning up) leaves its hidden temporary file,
    as large as a checkpoint, beside the real ones. The run directories are ``<root>/<name>/<version>/
    checkpoints`` (every logger's layout), ``<root>/lightning_logs/<run name>/<version>/checkpoints`` (lintf's
    named runs) and ``<root>/checkpoints``.

    Returns:
        each removed file and its size in bytes.
    """
    removed = []
    for root in roots:
        for pattern in ("*/*/*/checkpoints/.*", "*/*/checkpoints/.*", "checkpoints/.*"):
            for path in Path(root).glob(pattern):
                try:
                    if path.is_file() and is_stale_temporary(path):
                        size = path.stat().st_size
                        path.unlink()
                        removed.append((path, size))
                except OSError:  # gone meanwhile, or not ours to delete: leave it
                    continue
    return removed


def why_not_written(path: Path, error: OSError) -> str:
    """Why ``path`` could not be written, in words: no space (and how much is free), not writable, or the error."""
    directory = path.parent
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(directory).free if directory.exists() else 0
        return f"no space left on the device of {directory} ({free / 2**20:.0f} MB free)"
    if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{directory} is not writable ({os.strerror(error.errno)})"
    return f"{type(error).__name__}: {error.strerror or error}"


def describe_write_error(path: Path, error: OSError) -> str:
    """One paragraph for a checkpoint that could not be written: why, how much was needed, what to do."""
    return (f"could not write checkpoint {path}: {why_not_written(path, error)}. The checkpoints written before are "
            "intact and no partial file was left. Free space or choose a writable --trainer.default_root_dir, then "
            "continue with --ckpt_path last.")


class UnverifiedCheckpoint(UserWarning):
    """A checkpoint read without a digest to check it against (copied without its ``.sha256``, or older)."""


_UNVERIFIED: set[str] = set()
"""Checkpoints read without a digest, each named once per process."""


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
    except Exception as error:
        damage = damage_of(path)  # torch's words for random bytes or a cut copy do not say so
        if damage is not None:
            what = "file" if "not a checkpoint" in damage else "checkpoint"
            raise CheckpointFileError(f"{what} {path} {damage}.") from None
        raise_unreadable(path, error)
    if not isinstance(checkpoint, dict):
        raise CheckpointFileError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint (a dict with "
                                  "state_dict and hyper_parameters)")
    if not sidecar_of(path).is_file() and os.path.abspath(path) not in _UNVERIFIED:
        _UNVERIFIED.add(os.path.abspath(path))
        warnings.warn(f"checkpoint {path} has no {sidecar_of(path).name} beside it, so it was not verified against a "
                      "digest (copy the .sha256 file with a checkpoint to have it checked)", UnverifiedCheckpoint,
                      stacklevel=2)
    return checkpoint


def raise_unreadable(path: str | Path, error: Exception) -> NoReturn:
    """CheckpointFileError for a checkpoint-like file that torch.load(weights_only=True) refused."""
    if isinstance(error, pickle.UnpicklingError):  # an object outside tensors and plain data: refused, never built
        found = re.search(r"GLOBAL (\S+)", str(error))
        named = f" (it names {found.group(1)})" if found else ""
        raise CheckpointFileError(
            f"checkpoint {path} holds objects whose loading would run code{named}; lintf reads checkpoints with "
            "torch.load(weights_only=True): tensors and plain data only. Pass a checkpoint written by lintf."
        ) from None
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    raise CheckpointFileError(  # torch raises RuntimeError, EOFError, ... for a damaged file
        f"cannot read checkpoint {path}: {type(error).__name__}: {reason}. lintf reads checkpoints with "
        "torch.load(weights_only=True): tensors and plain data only, never objects whose loading runs code."
    ) from None


def save_checkpoint_file(checkpoint: dict[str, Any], path: Path) -> None:
    """Write ``checkpoint`` to ``path`` whole (a temporary renamed into place), then its sha256 sidecar.

    Raises:
        OSError: the file could not be written (no space, a read-only directory); no temporary is left.
    """
    temporary = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as file:  # straight to the target directory: no copy in memory or in /tmp
            torch.save(checkpoint, file)
            file.flush()
            os.fsync(file.fileno())
        digest = file_sha256(temporary)
        sidecar_of(path).unlink(missing_ok=True)  # never a stale digest beside a new file
        os.replace(temporary, path)
        write_atomically(sidecar_of(path), f"{digest}  {path.name}\n")
    except RuntimeError as error:  # torch's zip writer reports a failed write as its own error, after the OSError
        cause = error.__context__
        if isinstance(cause, OSError):
            raise cause from None
        raise
    finally:
        temporary.unlink(missing_ok=True)


class VerifiedCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO``, writing atomically with a sha256 sidecar and verifying it on load.

    A save that fails (no space, a read-only directory) removes its temporary file and raises
    CheckpointWriteError with one paragraph; the checkpoint it would have replaced is untouched.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} writes local files and takes no storage_options")
        try:
            save_checkpoint_file(checkpoint, Path(path))
        except OSError as error:
            raise CheckpointWriteError(describe_write_error(Path(path), error)) from None

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> dict:
        """``load_checkpoint_file``: whatever Lightning asks, nothing in a checkpoint runs code."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return load_checkpoint_file(path, map_location=map_location if map_location is not None else "cpu")

    def remove_checkpoint(self, path: str | Path) -> None:
        super().remove_checkpoint(path)
        sidecar_of(path).unlink(missing_ok=True)
