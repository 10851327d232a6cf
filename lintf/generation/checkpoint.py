"""The checkpoint that ``lintf generate`` reads: found (a path, ``last`` or ``best``), vetted, rebuilt as a task.

A path is read once by ``lintf.run.checkpoint_search`` (the digest verified, tensors and plain data
only); ``last`` and ``best`` name the newest such file of any autoregressive task under the search
directory, chosen as ``fit`` and ``test`` choose theirs. The hyper-parameters pass the same check as
those of ``--ckpt_path`` (``check_checkpoint_hyperparameters``) before the task is built from them;
the class that is built is an imported ``AutoregressiveTask`` subclass, never a name taken from the file.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import lintf.tasks  # noqa: F401  (the built-in tasks become known subclasses)
from lintf.run.checkpoint_search import (ALIASES, CheckpointError, find_checkpoint, find_checkpoints,
                                         hyperparameter_keys, read_checkpoint, require_current_format, task_of)
from lintf.run.config_checks import check_checkpoint_hyperparameters
from lintf.tasks.autoregressive import AutoregressiveTask


def autoregressive_tasks() -> dict[str, type[AutoregressiveTask]]:
    """Every imported subclass of ``AutoregressiveTask`` by the class path a checkpoint records."""
    found: dict[str, type[AutoregressiveTask]] = {}
    pending = [AutoregressiveTask]
    while pending:
        for subclass in pending.pop().__subclasses__():
            found[f"{subclass.__module__}.{subclass.__qualname__}"] = subclass
            pending.append(subclass)
    return found


def short_names(tasks: dict[str, type]) -> str:
    return ", ".join(sorted(cls.__name__ for cls in tasks.values()))


def find_generating_checkpoint(ckpt_path: str, root: str) -> tuple[str, dict[str, Any], type[AutoregressiveTask]]:
    """The checkpoint of ``ckpt_path``, read, and the autoregressive task class that wrote it.

    Args:
        ckpt_path: a .ckpt file, or 'last' / 'best': the newest ``last.ckpt`` / ``best.ckpt`` of an
            autoregressive task under ``root``.
        root: the directory searched for 'last' and 'best'.

    Raises:
        CheckpointError: one paragraph naming the value and what is allowed.
    """
    tasks = autoregressive_tasks()
    if ckpt_path in ALIASES:
        found = []
        for name in tasks:
            try:
                found.append(find_checkpoint(ckpt_path, name, [root]))
            except CheckpointError:
                continue  # a task with no such checkpoint here
        if not found:
            raise CheckpointError(
                f"--ckpt_path {ckpt_path}: no {ALIASES[ckpt_path]} of an autoregressive task ({short_names(tasks)}) "
                f"under {os.path.abspath(root)}. Train one first (lintf fit --config configs/copy.yaml), search "
                "another directory with --root, or pass the path of a .ckpt file."
            )
        path, checkpoint = max(found, key=lambda item: os.path.getmtime(item[0]))
        return path, checkpoint, tasks[task_of(checkpoint)]
    if not os.path.isfile(ckpt_path):
        nearby = find_checkpoints([root], "*.ckpt")[:3]
        hint = f"; checkpoints under {os.path.abspath(root)}: {', '.join(nearby)}" if nearby else ""
        raise CheckpointError(f"checkpoint not found: {ckpt_path}. --ckpt_path takes an existing .ckpt file, 'last' "
                              f"or 'best' (the newest of an autoregressive task under --root){hint}.")
    checkpoint = read_checkpoint(ckpt_path)
    written_by = task_of(checkpoint)
    if written_by not in tasks:
        origin = f"task {written_by}" if written_by else "something other than a lintf task"
        raise CheckpointError(
            f"checkpoint {ckpt_path} was written by {origin}, which does not generate token by token. lintf generate "
            f"takes a checkpoint of an autoregressive task: {short_names(tasks)}."
        )
    require_current_format(ckpt_path, checkpoint)
    return ckpt_path, checkpoint, tasks[written_by]


def build_task(path: str, checkpoint: dict[str, Any], task_class: type[AutoregressiveTask]) -> AutoregressiveTask:
    """The task of ``checkpoint``'s hyper-parameters (vetted first) with its weights, in eval mode.

    Args:
        path: where ``checkpoint`` was read (for messages).
        checkpoint: the dict ``find_generating_checkpoint`` returned.
        task_class: the class that wrote it.
    """
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    check_checkpoint_hyperparameters(hparams, hyperparameter_keys(task_class), path)
    accepted = inspect.signature(task_class.__init__).parameters
    try:
        task = task_class(**{key: value for key, value in hparams.items() if key in accepted and key != "self"})
        task.load_state_dict(checkpoint["state_dict"])
    except (TypeError, ValueError, KeyError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"checkpoint {path} does not rebuild its {task_class.__name__} ({type(error).__name__}: "
                              f"{reason}); its hyper_parameters and state_dict must be those a lintf run saved.") from None
    return task.eval()
