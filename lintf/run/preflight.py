"""Checks ``lintf`` runs before a subcommand starts, so a doomed run stops in seconds, not mid-training.

* The optimizer and schedule are built once on the model's parameters: an invalid learning rate, or
  a step-count schedule (OneCycleLR) shorter than ``trainer.max_steps``, which would crash at step
  ``total_steps + 1``, is reported before any work.
* A checkpoint given with ``--ckpt_path`` must fit the model (same weight names and shapes), and a
  resumed ``fit`` must ask for the optimizer and schedule the checkpoint ran with: a resumed run
  continues the checkpoint's, so different settings would silently not apply (and the run's saved
  config would record values that never ran).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


PROGRESS_KEYS = {"last_epoch", "_step_count", "_get_lr_called_within_step", "_last_lr", "_is_initial", "verbose",
                 "_initial_step"}
"""Scheduler state that advances as training runs; every other entry is a setting."""
OPTIMIZER_SETTINGS = ("weight_decay", "eps", "initial_lr", "max_lr", "min_lr")
MAX_LISTED = 4


class RunCheckError(ValueError):
    """A run that would fail or silently differ from its configuration."""


def built_optimizer(model: LightningModule) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and scheduler (or None) of ``model.configure_optimizers()``, built on its parameters."""
    try:
        configured = model.configure_optimizers()
    except (ValueError, TypeError, ZeroDivisionError) as error:  # torch's own checks of the settings
        raise RunCheckError(f"model.optimizer / model.lr_scheduler cannot be built for this model: "
                            f"{type(error).__name__}: {error}") from None
    if isinstance(configured, dict):
        scheduler = configured.get("lr_scheduler")
        return configured["optimizer"], scheduler.get("scheduler") if isinstance(scheduler, dict) else scheduler
    return configured, None


def check_schedule_length(scheduler: Any, steps: int, why: str) -> None:
    """RunCheckError if a scheduler with a fixed step count ends before the run's ``steps`` optimizer steps.

    Args:
        scheduler: the run's learning-rate scheduler (or None).
        steps: the optimizer steps the run will take.
        why: what sets that number, e.g. ``trainer.max_steps=7000``.
    """
    total = getattr(scheduler, "total_steps", None)
    if total is not None and steps > total:
        name = type(scheduler).__name__
        raise RunCheckError(
            f"model.lr_scheduler {name} has total_steps={total}, but {why}: it would stop the run with an error at "
            f"step {total + 1}. Set --model.init_args.lr_scheduler.init_args.total_steps {steps} (or more), or "
            f"--trainer.max_steps {total}."
        )


class CheckScheduleLength(Callback):
    """Repeats the schedule-length check once the data is known, for runs bounded by epochs, not steps."""

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.max_steps != -1 or not trainer.lr_scheduler_configs:
            return  # a step-bounded run was checked before it started
        steps = int(trainer.estimated_stepping_batches)
        for config in trainer.lr_scheduler_configs:
            check_schedule_length(config.scheduler, steps, f"trainer.max_epochs={trainer.max_epochs} makes "
                                  f"{steps} optimizer steps")


def differences(saved: dict[str, Any], fresh: dict[str, Any], keys: Any, prefix: str) -> list[str]:
    """``prefix.key: checkpoint A, this config B`` for each key of ``keys`` whose values differ."""
    return [f"{prefix}.{key}: checkpoint {saved[key]!r}, this config {fresh[key]!r}"
            for key in keys if key in saved and key in fresh and saved[key] != fresh[key]]


def resume_differences(checkpoint: dict[str, Any], optimizer: torch.optim.Optimizer, scheduler: Any) -> list[str]:
    """Optimizer and schedule settings of this config that differ from the checkpoint's."""
    found = []
    saved_schedulers = checkpoint.get("lr_schedulers") or []
    if (scheduler is None) != (not saved_schedulers):
        found.append(f"lr_scheduler: checkpoint {'has one' if saved_schedulers else 'has none'}, this config "
                     f"{'has one' if scheduler is not None else 'has none'}")
    elif scheduler is not None:
        fresh = scheduler.state_dict()
        found += differences(saved_schedulers[0], fresh, sorted(set(fresh) - PROGRESS_KEYS), "lr_scheduler")
    saved_optimizers = checkpoint.get("optimizer_states") or []
    if saved_optimizers:
        keys = OPTIMIZER_SETTINGS + (() if scheduler is not None else ("lr",))
        for saved_group, group in zip(saved_optimizers[0]["param_groups"], optimizer.state_dict()["param_groups"]):
            found += differences(saved_group, group, keys, "optimizer")
    return list(dict.fromkeys(found))


def weight_mismatches(model: LightningModule, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Weights of the checkpoint that this model lacks, has in another shape, or has that the checkpoint lacks."""
    own = model.state_dict()
    found = [f"{name}: {tuple(value.shape)} in the checkpoint, {tuple(own[name].shape)} here"
             for name, value in state_dict.items() if name in own and tuple(value.shape) != tuple(own[name].shape)]
    found += [f"{name}: only in the checkpoint" for name in state_dict if name not in own]
    found += [f"{name}: not in the checkpoint" for name in own if name not in state_dict]
    return found


def listed(items: list[str]) -> str:
    more = f"; and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return "; ".join(items[:MAX_LISTED]) + more


def check_checkpoint_fits(model: LightningModule, checkpoint: dict[str, Any], path: str) -> None:
    """RunCheckError if the weights of ``checkpoint`` (read from ``path``) do not fit ``model``."""
    mismatches = weight_mismatches(model, checkpoint.get("state_dict", {}))
    if mismatches:
        raise RunCheckError(
            f"checkpoint {path} does not fit this model: {listed(mismatches)}. The data decides vocab_size and "
            "max_length: use the data and model settings of the run that wrote it (its config.yaml)."
        )


def check_before_fit(model: LightningModule, max_steps: int, checkpoint: dict[str, Any] | None,
                     ckpt_path: str | None, new_cycle: bool = False) -> None:
    """Every check of a ``fit`` run; raises RunCheckError with one paragraph.

    Args:
        model: the task.
        max_steps: ``trainer.max_steps``.
        checkpoint: the checkpoint a resumed run continues (None: a new run).
        ckpt_path: where that checkpoint was read from.
        new_cycle: the resumed run's schedule ended, and a new one runs from the checkpoint's step.
    """
    optimizer, scheduler = built_optimizer(model)
    if checkpoint is not None:
        check_checkpoint_fits(model, checkpoint, ckpt_path)
        saved = checkpoint if not new_cycle else {**checkpoint, "lr_schedulers": [scheduler.state_dict()]}
        changed = resume_differences(saved, optimizer, scheduler)
        if changed:
            raise RunCheckError(
                f"resuming from {ckpt_path}, whose optimizer and schedule differ from this config: {listed(changed)}. "
                "A resumed run continues the checkpoint's optimizer and schedule, so these settings would not "
                "apply: use the values of the run that wrote it (its config.yaml), or start a new run."
            )
    if max_steps != -1:
        start = int(checkpoint.get("global_step", 0)) if new_cycle else 0
        check_schedule_length(scheduler, max_steps - start, f"trainer.max_steps={max_steps}"
                              + (f" makes {max_steps - start} steps from step {start}" if start else ""))
