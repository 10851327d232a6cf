"""Finding and vetting the checkpoint of ``--ckpt_path`` (a file, ``last`` or ``best``) before any training starts.

``last`` and ``best`` name the newest such file of this experiment: written by the configured task,
with the configured model settings, under the directories that hold the configuration's runs.
"""

from __future__ import annotations

import glob
import importlib
import inspect
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from lintf.layout.checkpoint_version import FORMAT, format_of
from lintf.run.checkpoint_files import CheckpointFileError, CheckpointIntegrityError, load_checkpoint_file
from lintf.run.checkpoint_format import UPGRADE_COMMAND, task_name


class CheckpointError(ValueError):
    """A ``--ckpt_path`` that does not exist, cannot be read, or belongs to another task."""


ALIASES = {"last": "last.ckpt", "best": "best.ckpt"}
UNSAVED_ARGUMENTS = ("optimizer", "lr_scheduler")
"""Task arguments never saved in a checkpoint's hyper-parameters (the run's optimizer state records them)."""
LINKED_FROM_DATA = ("vocab_size", "max_length")
"""Task arguments the data module sets (``data.X`` -> ``model.init_args.X``), absent from the parsed config."""


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint dict at ``path`` without copying its tensors (memory-mapped), its sha256 verified."""
    try:
        return load_checkpoint_file(path, mmap=True)
    except CheckpointIntegrityError as error:
        raise CheckpointError(str(error)) from None
    except CheckpointFileError as error:
        raise CheckpointError(
            f"{error} --ckpt_path takes a .ckpt file written by a lintf run (<run>/checkpoints/last.ckpt or "
            "best.ckpt), 'last' or 'best'."
        ) from None


def task_of(checkpoint: dict[str, Any]) -> str | None:
    """Class path of the task that wrote ``checkpoint`` (None if not written by a lintf task)."""
    return task_name(checkpoint)


def require_current_format(path: str, checkpoint: dict[str, Any]) -> None:
    """CheckpointError naming the upgrade command if ``checkpoint`` is in an older layout."""
    if format_of(checkpoint) < FORMAT:
        raise CheckpointError(
            f"checkpoint {path} was written by an older lintf (checkpoint format {format_of(checkpoint)}, this "
            f"lintf reads format {FORMAT}). Write an upgraded copy with `{UPGRADE_COMMAND} {path}` "
            f"(the original is kept) and pass that to --ckpt_path."
        )


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


def resolve_checkpoint(ckpt_path: str, task: str, roots: list[str], settings: Mapping[str, Any] | None = None) -> str:
    """The path of ``find_checkpoint``'s checkpoint (see there)."""
    return find_checkpoint(ckpt_path, task, roots, settings)[0]


def find_checkpoint(ckpt_path: str, task: str, roots: list[str],
                    settings: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Turn ``ckpt_path`` (a file, 'last' or 'best') into an existing checkpoint of ``task``, and read it.

    'last' / 'best' pick the newest ``last.ckpt`` / ``best.ckpt`` of this experiment under ``roots`` (the
    logger's save_dir and the trainer's default_root_dir): written by ``task``, with the model
    ``settings`` of this configuration (checkpoints of other experiments in the same directory are skipped).

    Args:
        ckpt_path: a path, 'last' or 'best'.
        task: class path of the configured task.
        roots: directories searched for 'last' / 'best'.
        settings: the configured task's arguments (``model.init_args``); None matches any.

    Returns:
        the path and the checkpoint dict (tensors memory-mapped), its digest verified.

    Raises:
        CheckpointError: one paragraph saying what is wrong and what is allowed.
    """
    task = canonical_class_path(task)
    where = " or ".join(roots)
    if ckpt_path in ALIASES:
        return newest_of_experiment(ckpt_path, task, roots, settings)
    if not os.path.isfile(ckpt_path):
        nearby = find_checkpoints(roots, "*.ckpt")[:3]
        hint = f"; recent checkpoints: {', '.join(nearby)}" if nearby else ""
        raise CheckpointError(
            f"checkpoint not found: {ckpt_path}. --ckpt_path takes an existing .ckpt file, 'last' (the newest "
            f"last.ckpt of this experiment under {where}) or 'best'{hint}."
        )
    checkpoint = read_checkpoint(ckpt_path)
    written_by = task_of(checkpoint)
    if written_by != task:
        origin = f"task {written_by}" if written_by else "something other than a lintf task"
        raise CheckpointError(
            f"checkpoint {ckpt_path} was written by {origin}, but this run uses {task}. Pass a checkpoint of "
            f"{task}, or choose the matching task with --model {written_by or '<TaskClass>'} and its data module."
        )
    require_current_format(ckpt_path, checkpoint)
    return ckpt_path, checkpoint


def newest_of_experiment(alias: str, task: str, roots: list[str],
                         settings: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The newest readable ``last.ckpt`` / ``best.ckpt`` of ``task`` with these model ``settings`` under ``roots``.

    Unreadable files (a run killed while writing, a damaged disk) are skipped with a warning naming
    them, so an old broken file never hides a newer good one.
    """
    filename, where = ALIASES[alias], " or ".join(roots)
    unreadable, older, other_tasks, other_settings = [], [], 0, []
    for path in find_checkpoints(roots, filename):
        try:
            checkpoint = read_checkpoint(path)
        except CheckpointError:
            unreadable.append(path)
            continue
        if task_of(checkpoint) != task:
            other_tasks += 1
        elif format_of(checkpoint) < FORMAT:
            older.append(path)
        elif settings is not None and setting_differences(checkpoint.get("hyper_parameters") or {}, settings):
            other_settings.append((path, setting_differences(checkpoint.get("hyper_parameters") or {}, settings)))
        else:
            if unreadable:
                warnings.warn(f"--ckpt_path {alias}: skipped unreadable {', '.join(unreadable)}; using {path}",
                              stacklevel=2)
            return path, checkpoint
    notes = [f"{other_tasks} from other tasks"] if other_tasks else []
    if other_settings:
        path, differences = other_settings[0]
        notes.append(f"{len(other_settings)} of {task} with other model settings, the newest {path} ("
                     f"{'; '.join(differences[:3])})")
    if unreadable:
        notes.append(f"unreadable: {', '.join(unreadable)}")
    if older:
        notes.append(f"written by an older lintf: {', '.join(older)} (upgrade with `{UPGRADE_COMMAND} PATH`)")
    raise CheckpointError(
        f"--ckpt_path {alias}: no {filename} written by {task} with this config's model settings under {where} "
        f"{'(' + '; '.join(notes) + ')' if notes else '(none found)'}. Train first (lintf fit ...), give the settings of the run you mean (its "
        "config.yaml), or pass the path of a .ckpt file."
    )


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``encoder.d_model``); tuples as lists, so saved and parsed values compare."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping) and value:
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return flat


def setting_differences(saved: Mapping[str, Any], configured: Mapping[str, Any]) -> list[str]:
    """``key: checkpoint A, this config B`` for each model setting both define with different values.

    Args:
        saved: the checkpoint's ``hyper_parameters``.
        configured: the configured task's arguments (``model.init_args`` as a dict).
    """
    saved, configured = flat_settings(saved), flat_settings(configured)
    return [f"{key}: checkpoint {saved[key]!r}, this config {configured[key]!r}"
            for key in sorted(saved.keys() & configured.keys()) if not key.startswith("_") and saved[key] != configured[key]]


def hyperparameter_keys(task_class: type) -> set[str]:
    """The keys a checkpoint of ``task_class`` may hold in ``hyper_parameters``: every constructor argument of
    its classes (Lightning collects them up the ``__init__`` chain) except the optimizer and schedule, which
    are never saved, and Lightning's own ``_class_path`` / ``_instantiator``."""
    keys = {"_class_path", "_instantiator"}
    for cls in task_class.__mro__:
        if "__init__" in vars(cls):
            keys |= set(inspect.signature(cls.__init__).parameters)
    return keys - {"self", "args", "kwargs", *UNSAVED_ARGUMENTS}


def model_settings(config: Any) -> dict[str, Any]:
    """The configured task's arguments (``model.init_args``) that a checkpoint saves, as plain data.

    Without those the data decides (linked at instantiation) and the optimizer and schedule (never saved).
    """
    init_args = config.model.get("init_args")
    settings = init_args.as_dict() if init_args is not None else {}
    return {key: value for key, value in settings.items() if key not in (*LINKED_FROM_DATA, *UNSAVED_ARGUMENTS)}


def search_roots(config: Any) -> list[str]:
    """Directories that hold this configuration's runs: the logger's save_dir and default_root_dir."""
    roots = [config.trainer.get("default_root_dir") or os.getcwd()]
    logger = config.trainer.get("logger")
    loggers = logger if isinstance(logger, list) else [logger]
    for item in loggers:
        init_args = getattr(item, "init_args", None)
        save_dir = init_args.get("save_dir") if init_args is not None else None
        if save_dir:
            roots.insert(0, save_dir)
    return list(dict.fromkeys(roots))
