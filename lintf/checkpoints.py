"""Finding and vetting checkpoints for ``--ckpt_path`` before any training starts."""

from __future__ import annotations

import glob
import importlib
import os
from collections.abc import Iterable
from typing import Any

import torch


class CheckpointError(ValueError):
    """A ``--ckpt_path`` that does not exist, cannot be read, or belongs to another task."""


ALIASES = {"last": "last.ckpt", "best": "best.ckpt"}


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint dict at ``path`` without copying its tensors (memory-mapped)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {type(error).__name__}: {error}. --ckpt_path takes a .ckpt file "
            f"written by a lintf run (<run>/checkpoints/last.ckpt or best.ckpt), 'last' or 'best'."
        ) from None


def task_of(checkpoint: dict[str, Any]) -> str | None:
    """Class path of the task that wrote ``checkpoint`` (None if not written by a lintf task)."""
    return checkpoint.get("lintf_task")


def canonical_class_path(class_path: str) -> str:
    """``module.Qualname`` where the class is defined (``lintf.tasks.CopyTask`` -> ``lintf.tasks.copy.CopyTask``)."""
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return class_path
    return f"{cls.__module__}.{cls.__qualname__}"


def find_checkpoints(roots: Iterable[str], filename: str) -> list[str]:
    """Files named ``filename`` in any ``checkpoints`` directory below ``roots``, newest first."""
    found = {
        os.path.abspath(path)
        for root in roots
        for path in glob.glob(os.path.join(root, "**", "checkpoints", filename), recursive=True)
    }
    return sorted(found, key=os.path.getmtime, reverse=True)


def resolve_checkpoint(ckpt_path: str, task: str, roots: list[str]) -> str:
    """Turn ``ckpt_path`` (a file, 'last' or 'best') into an existing checkpoint of ``task``.

    'last' / 'best' pick the newest ``last.ckpt`` / ``best.ckpt`` written by ``task`` under
    ``roots`` (the logger's save_dir and the trainer's default_root_dir).

    Raises:
        CheckpointError: one paragraph saying what is wrong and what is allowed.
    """
    task = canonical_class_path(task)
    where = " or ".join(roots)
    if ckpt_path in ALIASES:
        candidates = find_checkpoints(roots, ALIASES[ckpt_path])
        matching = [path for path in candidates if task_of(read_checkpoint(path)) == task]
        if not matching:
            raise CheckpointError(
                f"--ckpt_path {ckpt_path}: no {ALIASES[ckpt_path]} written by {task} under {where} "
                f"({len(candidates)} from other tasks). Train first (lintf fit ...), or pass the path of a .ckpt file."
            )
        return matching[0]
    if not os.path.isfile(ckpt_path):
        nearby = find_checkpoints(roots, "*.ckpt")[:3]
        hint = f"; recent checkpoints: {', '.join(nearby)}" if nearby else ""
        raise CheckpointError(
            f"checkpoint not found: {ckpt_path}. --ckpt_path takes an existing .ckpt file, 'last' (the newest "
            f"last.ckpt of this task under {where}) or 'best'{hint}."
        )
    written_by = task_of(read_checkpoint(ckpt_path))
    if written_by != task:
        origin = f"task {written_by}" if written_by else "something other than a lintf task"
        raise CheckpointError(
            f"checkpoint {ckpt_path} was written by {origin}, but this run uses {task}. Pass a checkpoint of "
            f"{task}, or choose the matching task with --model {written_by or '<TaskClass>'} and its data module."
        )
    return ckpt_path
