"""A step-count learning-rate schedule sized to the run: it follows ``trainer.max_steps`` unless set apart.

A config sizes OneCycleLR's ``total_steps`` for its own ``max_steps``; a user who shortens the run with
``--trainer.max_steps 300`` means the schedule too (else the rate never anneals). So when the command
line sets ``trainer.max_steps`` and not ``total_steps``, ``total_steps`` becomes ``max_steps``, and lintf
says so. A resumed run keeps its checkpoint's schedule; continuing a run whose schedule has ended
(``--ckpt_path last --trainer.max_steps`` beyond it) runs a new cycle over the added steps, with the
weights and optimizer state of the checkpoint: the one way to train a finished run longer.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

TOTAL_STEPS = "total_steps"


def scheduler_arguments(config: Any) -> Any:
    """The ``init_args`` of ``model.init_args.lr_scheduler`` when it has ``total_steps``, else None."""
    model_arguments = getattr(config.get("model"), "init_args", None)
    scheduler = getattr(model_arguments, "lr_scheduler", None) if model_arguments is not None else None
    arguments = getattr(scheduler, "init_args", None)
    return arguments if arguments is not None and arguments.get(TOTAL_STEPS) is not None else None


def set_on_command_line(argv: list[str], key: str) -> bool:
    """Whether an option naming ``key`` (``--...key`` or ``--...key=value``) is on the command line."""
    return any(arg.startswith("--") and arg.split("=", 1)[0].endswith(f".{key}") for arg in argv)


def saved_schedule(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first scheduler state of a checkpoint, or None."""
    schedulers = (checkpoint or {}).get("lr_schedulers") or []
    return schedulers[0] if schedulers else None


def is_extension(checkpoint: dict[str, Any] | None, max_steps: int, argv: list[str]) -> bool:
    """Whether a fit from ``checkpoint`` up to ``max_steps`` goes past the end of its schedule (``total_steps``
    not set on the command line: that one is the user's, and checked as given)."""
    saved = saved_schedule(checkpoint)
    if saved is None or saved.get(TOTAL_STEPS) is None or max_steps == -1 or set_on_command_line(argv, TOTAL_STEPS):
        return False
    return max_steps > int(saved[TOTAL_STEPS]) and max_steps > int(checkpoint.get("global_step", 0))


def schedule_steps(arguments: Any, steps: int) -> int:
    """``total_steps`` for a schedule of ``steps`` steps: one more where OneCycleLR's warm-up would span 0 steps
    (``pct_start * total_steps == 1`` divides by zero in torch's OneCycleLR)."""
    pct_start = arguments.get("pct_start")
    return steps + 1 if pct_start is not None and float(pct_start) * steps == 1.0 else steps


def size_schedule(config: Any, argv: list[str], checkpoint: dict[str, Any] | None) -> str | None:
    """Set ``total_steps`` of the run's schedule as the module's docstring says; the notice to print, or None.

    Args:
        config: the ``fit`` config (changed in place).
        argv: the command line.
        checkpoint: the checkpoint a resumed run continues (None: a new run).
    """
    arguments = scheduler_arguments(config)
    max_steps = int(config.trainer.get("max_steps") or -1)
    if arguments is None or max_steps <= 0:
        return None  # no step bound (-1), or a bad one the trainer refuses
    total, scheduler = int(arguments[TOTAL_STEPS]), config.model.init_args.lr_scheduler.class_path.rsplit(".", 1)[-1]
    if set_on_command_line(argv, TOTAL_STEPS):
        return None
    if is_extension(checkpoint, max_steps, argv):
        step, ends = int(checkpoint["global_step"]), int(saved_schedule(checkpoint)[TOTAL_STEPS])
        arguments[TOTAL_STEPS] = schedule_steps(arguments, max_steps - step)
        peak = f"rises again to {float(arguments['max_lr']):g} and " if arguments.get("max_lr") is not None else ""
        return (f"lintf: the run's {scheduler} schedule ends at step {ends}; training on to step {max_steps} runs a "
                f"new cycle of {max_steps - step} steps from step {step} ({TOTAL_STEPS} {arguments[TOTAL_STEPS]}), "
                f"with the checkpoint's weights and optimizer state: the learning rate {peak}anneals by step "
                f"{max_steps}, as in a fresh run of {max_steps - step} steps")
    saved = saved_schedule(checkpoint)
    if checkpoint is not None:
        if saved is None or saved.get(TOTAL_STEPS) in (None, total):
            return None
        arguments[TOTAL_STEPS] = int(saved[TOTAL_STEPS])
        return f"lintf: the resumed run keeps its {scheduler} schedule ({TOTAL_STEPS} {saved[TOTAL_STEPS]})"
    if total == max_steps or not set_on_command_line(argv, "max_steps"):
        return None
    arguments[TOTAL_STEPS] = schedule_steps(arguments, max_steps)
    return (f"lintf: the {scheduler} schedule follows trainer.max_steps: {TOTAL_STEPS} {total} -> "
            f"{arguments[TOTAL_STEPS]} (set --model.init_args.lr_scheduler.init_args.{TOTAL_STEPS} to keep it apart)")


class StartNewCycle(Callback):
    """Drops the checkpoint's ended schedule as it is restored, so the run's fresh one (sized by ``size_schedule``)
    starts its cycle; the weights, optimizer state and step count come from the checkpoint.

    Restoring the optimizer state also brings back the rates its parameter groups ended with (``lr``, and the
    momentum and ``max_lr`` a OneCycleLR writes there), over those the fresh schedule set; so the schedule's own
    are put back before the first step, which then runs at the new cycle's first rate as a fresh run's does.
    """

    SCHEDULED = ("lr", "betas", "momentum")
    """Optimizer settings a schedule sets per step; with the settings it adds to a parameter group (``initial_lr``)."""

    def __init__(self) -> None:
        self.fresh: list[list[dict[str, Any]]] = []

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint["lr_schedulers"] = []

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # after configure_optimizers made the fresh schedule, before the checkpoint's optimizer state is loaded
        self.fresh = [[{key: value for key, value in group.items() if key in self.scheduled(optimizer)}
                       for group in optimizer.param_groups] for optimizer in trainer.optimizers]

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for optimizer, groups in zip(trainer.optimizers, self.fresh):
            for group, fresh in zip(optimizer.param_groups, groups):
                group.update(fresh)

    def scheduled(self, optimizer: Any) -> set[str]:
        """The settings of ``optimizer``'s groups that a schedule owns: ``SCHEDULED`` and those it added."""
        return {*self.SCHEDULED, *(key for group in optimizer.param_groups for key in group
                                   if key != "params" and key not in optimizer.defaults)}
