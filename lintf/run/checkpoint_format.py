"""The layout of lintf checkpoints, and the upgrade of checkpoints written in an older layout.

Format 2 nests the encoder's options under ``encoder`` (``EncoderConfig``), keeps decoding options out
of the model, and names position codes ``positions.*``. Format 1 checkpoints (no ``lintf_format``
key) are upgraded with ``lintf checkpoint upgrade OLD.ckpt [NEW.ckpt]``: the weights and
hyperparameters carry over; the optimizer state does not (its parameter order changed), so the
upgraded file serves ``test``, ``predict`` and fine-tuning from its weights, not resuming.

What else an upgrade renames (tasks that moved, their renamed arguments and weights, options that
are decoding options now) the tasks' extensions register with ``register_format_upgrade``. The
version itself (``FORMAT``, ``format_of``) lives in ``lintf.layout.checkpoint_version``, beneath the
tasks that record it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lintf.layout.checkpoint_version import FORMAT, format_of
from lintf.run.checkpoint_files import CheckpointFileError, load_checkpoint_file, save_checkpoint_file, why_not_written
from lintf.run.commands import CommandError
from lintf.run.extensions import load_extensions

UPGRADE_COMMAND = "lintf checkpoint upgrade"
ENCODER_FIELDS = ("d_model", "n_layers", "n_heads", "attention", "attention_kwargs", "feature_map",
                  "feature_map_kwargs", "d_ff", "activation", "dropout", "norm")
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "loops")


@dataclass(frozen=True)
class FormatUpgrade:
    """What an upgrade to the current format renames or moves.

    Args:
        renamed_tasks: class path of a task when it was written -> its class path now.
        renamed_arguments: task argument when it was written -> its name now.
        renamed_weights: weight name when it was written -> its name now; a key ending in "." renames a prefix.
        decoding_fields: task arguments that are decoding options now (``--decoding``), moved out of the model.
    """

    renamed_tasks: Mapping[str, str] = field(default_factory=dict)
    renamed_arguments: Mapping[str, str] = field(default_factory=dict)
    renamed_weights: Mapping[str, str] = field(default_factory=dict)
    decoding_fields: tuple[str, ...] = ()


CORE_UPGRADE = FormatUpgrade(renamed_weights={"position_embedding": "positions.embedding",
                                              "row_embedding": "positions.row_embedding",
                                              "column_embedding": "positions.column_embedding"})
_registered: list[FormatUpgrade] = []


def register_format_upgrade(upgrade: FormatUpgrade) -> None:
    """Add an extension's renames to every upgrade (an extension calls this when it is loaded)."""
    if upgrade not in _registered:
        _registered.append(upgrade)


def upgrade_rules() -> FormatUpgrade:
    """lintf's renames and those of every installed extension, in one ``FormatUpgrade``."""
    load_extensions()
    rules = [CORE_UPGRADE, *_registered]
    return FormatUpgrade(
        renamed_tasks={old: new for rule in rules for old, new in rule.renamed_tasks.items()},
        renamed_arguments={old: new for rule in rules for old, new in rule.renamed_arguments.items()},
        renamed_weights={old: new for rule in rules for old, new in rule.renamed_weights.items()},
        decoding_fields=tuple(dict.fromkeys(name for rule in rules for name in rule.decoding_fields)),
    )


def task_name(checkpoint: dict[str, Any]) -> str | None:
    """Class path of the task that wrote ``checkpoint``, under its current name; None if not a lintf task's."""
    task = checkpoint.get("lintf_task")
    if task is None or format_of(checkpoint) >= FORMAT:  # the current format records the current name
        return task
    return upgrade_rules().renamed_tasks.get(task, task)


def renamed_weight(name: str, renamed: Mapping[str, str]) -> str:
    for old, new in renamed.items():
        if name == old or (old.endswith(".") and name.startswith(old)):
            return new + name[len(old):] if old.endswith(".") else new
    return name


def upgrade(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A format-2 copy of a format-1 ``checkpoint`` (weights and hyperparameters, no optimizer state)."""
    if format_of(checkpoint) >= FORMAT:
        return checkpoint
    rules = upgrade_rules()
    hparams = dict(checkpoint.get("hyper_parameters", {}))
    encoder = {key: hparams.pop(key) for key in ENCODER_FIELDS if key in hparams}
    decoding = {key: hparams.pop(key) for key in rules.decoding_fields if key in hparams}
    hparams = {rules.renamed_arguments.get(key, key): value for key, value in hparams.items()}
    hparams["encoder"] = {key: (str(value) if key in ("attention", "feature_map") and value is not None else value)
                          for key, value in encoder.items()}
    if "_class_path" in hparams:
        hparams["_class_path"] = rules.renamed_tasks.get(hparams["_class_path"], hparams["_class_path"])
    upgraded = {key: value for key, value in checkpoint.items() if key not in TRAINING_STATE}
    upgraded["hyper_parameters"] = hparams
    upgraded["state_dict"] = {renamed_weight(name, rules.renamed_weights): value
                              for name, value in checkpoint["state_dict"].items()}
    upgraded["lintf_task"] = task_name(checkpoint)
    upgraded["lintf_format"] = FORMAT
    if decoding:
        upgraded["lintf_decoding"] = decoding  # for the record: give them with --decoding now
    return upgraded


def upgraded_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}-format{FORMAT}{path.suffix}")


def upgrade_file(old: Path, new: Path | None = None, /) -> Path:
    """Write a copy of a checkpoint of an older lintf in the current format; the original is kept.

    The weights and hyperparameters carry over; the optimizer state does not (its parameter order
    changed), so the copy serves ``test``, ``predict`` and fine-tuning from its weights, not resuming.

        lintf checkpoint upgrade lightning_logs/copy-linear/version_3/checkpoints/best.ckpt

    Args:
        old: a checkpoint written by an older lintf.
        new: where to write the upgrade (default: OLD-format2.ckpt beside it); nothing is overwritten.
    """
    if not old.is_file():
        raise CommandError(f"{old} is not a file")
    new = new or upgraded_path(old)
    if new.exists():
        raise CommandError(f"{new} exists; give another NEW path (nothing is overwritten)")
    try:
        checkpoint = load_checkpoint_file(old)
    except CheckpointFileError as error:
        raise CommandError(f"{error} `{UPGRADE_COMMAND}` takes a checkpoint written by an older lintf.") from None
    if format_of(checkpoint) >= FORMAT:
        raise CommandError(f"{old} is already in checkpoint format {FORMAT}; nothing to upgrade")
    try:
        save_checkpoint_file(upgrade(checkpoint), new)  # whole, with its .sha256 as every checkpoint
    except OSError as error:
        raise CommandError(f"cannot write {new}: {why_not_written(new, error)}. Give a NEW path in a writable "
                           f"directory with space; {old} is unchanged and no partial file was left.") from None
    print(f"wrote {new} (weights and hyperparameters of {old}; the optimizer state is not carried over)")
    return new


COMMANDS = {"upgrade": upgrade_file}
"""``lintf checkpoint <name>``."""
