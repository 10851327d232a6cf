"""Run names: what a run is, said by its directory (``lightning_logs/copy-linear/version_0``).

A new run's directory is ``<root>/lightning_logs/<name>/version_N``, where the name joins the task,
the attention (a hybrid stack by its kinds in order of first use: ``gated_delta_net+local``) and the
data where the task alone does not say it (a text file's stem, an image dataset, a speech corpus's
folder): ``stream_lm-linear-kjv``, ``stream_lm-gated_delta_net+local-mytext``, ``copy-linear``. Runs of
one name share a counter, so runs that differ elsewhere (a learning rate) are ``version_0``,
``version_1``, ... of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

SHORT_TASK_NAMES = {"language_model": "lm"}
"""Long words of task class names and their short forms in a run name."""
DATA_NAME_ARGUMENTS = ("path", "dataset", "train_manifest")
"""Data module arguments that name the data, in order of preference."""


def snake_case(class_name: str) -> str:
    """``StreamLanguageModelTask`` -> ``stream_language_model_task``; ``ASRTask`` -> ``asr_task``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower()


def class_word(class_path: str, suffix: str) -> str:
    """The class name of ``class_path`` without ``suffix``, in snake case: ``lintf.tasks.CopyTask`` -> ``copy``."""
    name = str(class_path).rsplit(".", 1)[-1]
    name = name[: -len(suffix)] if name.endswith(suffix) and name != suffix else name
    return snake_case(name)


def task_name(class_path: str) -> str:
    """``copy``, ``stream_lm``, ``image_generation``, ``asr``: the task class without ``Task``, shortened."""
    name = class_word(class_path, "Task")
    for long, short in SHORT_TASK_NAMES.items():
        name = name.replace(long, short)
    return name


def attention_name(attention: Any) -> str | None:
    """A registry name, a class path's class, or a hybrid stack's kinds joined by ``+`` (in order of first use)."""
    kinds = attention if isinstance(attention, list | tuple) else [attention]
    names = [str(kind).rsplit(".", 1)[-1] for kind in kinds if kind]
    return "+".join(dict.fromkeys(names)) or None


def data_name(class_path: str, init_args: Mapping[str, Any], task: str) -> str | None:
    """What names the data: a file's stem, a dataset's name, a manifest's folder; else the data class, unless it
    repeats the task (``CopyData`` for ``copy``) or says nothing (``TextStreamData``)."""
    for argument in DATA_NAME_ARGUMENTS:
        value = init_args.get(argument)
        if isinstance(value, str | os.PathLike) and str(value):
            path = os.path.normpath(str(value))
            if argument == "train_manifest":
                return os.path.basename(os.path.dirname(os.path.abspath(path))) or None
            return os.path.splitext(os.path.basename(path))[0] or None
    word = class_word(class_path, "Data") if class_path else ""
    return word if word and word != task else None


def safe(part: str) -> str:
    """``part`` with anything but letters, digits, ``_``, ``.``, ``+`` and ``-`` made ``_`` (a path component)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", part).strip(".") or "run"


def run_name(model: Mapping[str, Any], data: Mapping[str, Any] | None) -> str:
    """The name of a run of this task and data: ``task-attention-data``, the parts that are known.

    Args:
        model: the task's ``class_path`` and ``init_args`` (plain data).
        data: the data module's ``class_path`` and ``init_args``; None without one.
    """
    init_args = model.get("init_args") or {}
    encoder = init_args.get("encoder") or {}
    task = task_name(model.get("class_path") or "Task")
    attention = encoder.get("attention") if isinstance(encoder, Mapping) else getattr(encoder, "attention", None)
    parts = [task, attention_name(attention)]
    if data:
        parts.append(data_name(data.get("class_path") or "", data.get("init_args") or {}, task))
    return "-".join(safe(part) for part in parts if part)


def plain(value: Any) -> Any:
    """A parsed configuration section (a jsonargparse Namespace) as plain dicts; other values as they are."""
    return value.as_dict() if hasattr(value, "as_dict") else value


def config_run_name(config: Any) -> str | None:
    """``run_name`` of a parsed subcommand configuration (its ``model`` and ``data``); None without a model."""
    model, data = plain(config.get("model")), plain(config.get("data"))
    if not isinstance(model, Mapping):
        return None
    return run_name(model, data if isinstance(data, Mapping) else None)


def checkpoint_run_name(checkpoint: Mapping[str, Any]) -> str | None:
    """``run_name`` of the run that wrote ``checkpoint``, from the task's and data module's saved hyper-parameters
    (``copy-linear``, ``stream_lm-linear-kjv``); None for a checkpoint that names no task.

    Args:
        checkpoint: a Lightning checkpoint as read (``hyper_parameters``, ``datamodule_hyper_parameters``).
    """
    hparams = checkpoint.get("hyper_parameters") or {}
    class_path = hparams.get("_class_path") or checkpoint.get("lintf_task")
    if not isinstance(class_path, str) or not class_path:
        return None
    data = checkpoint.get("datamodule_hyper_parameters")
    data = {"class_path": data.get("_class_path") or "", "init_args": data} if isinstance(data, Mapping) else None
    return run_name({"class_path": class_path, "init_args": hparams}, data)
