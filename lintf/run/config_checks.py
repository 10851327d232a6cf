"""Which objects a config or a checkpoint may have lintf build: never a function to call.

jsonargparse builds an object wherever a value holds ``class_path`` (calling it with ``init_args``),
even inside plain-data options such as ``head_kwargs`` (``dict[str, Any]``), and a Callable-typed
option (the optimizer, the schedule) accepts any function: ``{class_path: os.system, init_args:
{command: ...}}`` would run a shell command while the config is instantiated. So, before anything
is instantiated, every ``class_path`` of a parsed config is checked here: it may stand only where
lintf expects an object, and at the optimizer and schedule it must name an optimizer or a schedule
class. A checkpoint's hyper-parameters are plain data and hold no class path but the task's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from jsonargparse import Namespace

from lintf.names import import_class

OBJECT_OPTIONS = re.compile(r"^(model|data|decoding|model\.init_args\.(optimizer|lr_scheduler)|trainer\..+)$")
"""Options whose value may be an object given by ``class_path``: the task, the data, the decoding, the
optimizer and schedule, and the trainer's own typed options (callbacks, logger, plugins, ...), whose
classes jsonargparse checks against the Trainer's annotations."""

FACTORY_BASES: dict[str, tuple[type, ...]] = {
    "model.init_args.optimizer": (torch.optim.Optimizer,),
    "model.init_args.lr_scheduler": (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau),
}
"""Callable-typed options and the classes they must name (jsonargparse would accept any function)."""


class ClassPathError(ValueError):
    """A config or checkpoint names something lintf must not build or call."""


def class_paths(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted option, value) of every value below ``node`` that carries a ``class_path``.

    Args:
        node: a parsed config (jsonargparse Namespace), a dict or a list.
        where: the dotted option of ``node`` itself.
    """
    if isinstance(node, Mapping | Namespace):
        values = dict(node.items()) if isinstance(node, Mapping) else vars(node)
        if "class_path" in values and where:
            yield where, values
        for key, value in values.items():
            if key != "class_path":
                yield from class_paths(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list | tuple):
        for index, value in enumerate(node):
            yield from class_paths(value, f"{where}[{index}]")


def check_class_paths(config: Any, source: str) -> None:
    """ClassPathError unless every ``class_path`` in ``config`` stands where an object is expected and, at
    the optimizer and schedule, names a class of the right kind. Nothing is instantiated or called.

    Args:
        config: the parsed config of one subcommand (``self.config[subcommand]``).
        source: what the config came from, for the message ("the config", "checkpoint X").
    """
    for option, value in class_paths(config):
        option = re.sub(r"\[\d+\]$", "", option)
        class_path = str(value["class_path"] if isinstance(value, Mapping) else value.class_path)
        if not OBJECT_OPTIONS.match(option):
            raise ClassPathError(
                f"{option} in {source} names class_path {class_path!r}, but {option} holds plain data: lintf builds "
                "objects only for model, data, decoding, model.optimizer, model.lr_scheduler and the trainer's options"
            )
        bases = FACTORY_BASES.get(option)
        if bases is not None:
            check_factory_class(option, class_path, bases, source)


def check_factory_class(option: str, class_path: str, bases: tuple[type, ...], source: str) -> None:
    """ClassPathError unless ``class_path`` imports as a subclass of one of ``bases``."""
    cls = import_class(class_path)
    if isinstance(cls, type) and issubclass(cls, bases):
        return
    kind = " or ".join(f"{base.__module__}.{base.__qualname__}" for base in bases)
    found = "cannot be imported" if cls is None else "is not a class" if not isinstance(cls, type) else "is another class"
    raise ClassPathError(
        f"{option} in {source} names {class_path!r}, which {found}; it must name a subclass of {kind} "
        f"(e.g. {'torch.optim.AdamW' if 'optimizer' in option else 'torch.optim.lr_scheduler.OneCycleLR'})"
    )


def check_checkpoint_hyperparameters(hparams: Mapping[str, Any], accepted: set[str], path: str) -> None:
    """ClassPathError if a checkpoint's hyper-parameters hold anything a lintf task never writes there.

    A task saves its constructor's plain-data arguments (never the optimizer or the schedule) and its class
    path under ``_class_path``; anything else, or a ``class_path`` anywhere inside, is refused before the
    values reach the parser.

    Args:
        hparams: ``checkpoint["hyper_parameters"]``.
        accepted: the keys a checkpoint of this task may hold.
        path: the checkpoint's path, for the message.
    """
    unexpected = sorted(set(hparams) - accepted)
    if unexpected:
        raise ClassPathError(
            f"checkpoint {path} holds hyper-parameters that lintf never writes ({', '.join(unexpected)}); a checkpoint "
            f"of this task holds only {', '.join(sorted(accepted))}. Refusing to read settings from it: pass a "
            "checkpoint written by lintf"
        )
    for option, value in class_paths({key: value for key, value in hparams.items() if key != "_class_path"}):
        class_path = value["class_path"] if isinstance(value, Mapping) else value.class_path
        raise ClassPathError(f"checkpoint {path} names class_path {class_path!r} at {option}, where a lintf checkpoint "
                             "holds plain data; refusing to read settings from it")
