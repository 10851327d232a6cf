"""Every ``fit`` validates at its last step, so a short run has a validation metric and a ``best.ckpt``."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer


class ValidateAtTheEnd(Callback):
    """Asks Lightning to stop after the run's last optimizer step, which makes it validate there.

    Lightning validates every ``val_check_interval`` batches: a 300-step run with validation every 500
    would end with none (no val metric, no ``best.ckpt``). Setting ``trainer.should_stop`` at the last
    step is the request Lightning honours with a validation before stopping (as for early stopping); at
    a step that validates anyway it changes nothing.
    """

    def __init__(self) -> None:
        self.added_validation = False

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if is_last_step(trainer):
            trainer.should_stop = True
            self.added_validation = not validates_anyway(trainer)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        # A save in a validation Lightning would not have run comes before it counts the batch for its loggers,
        # and the resumed run would not count it either (found with Lightning 2.6): its first batch would be
        # logged at the step of this one. The count is the checkpoint's step, as for any other save.
        if not self.added_validation or trainer.global_step != checkpoint.get("global_step"):
            return
        state = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.state_dict")
        if state is not None and "_batches_that_stepped" in state:
            state["_batches_that_stepped"] = int(checkpoint["global_step"])


def validates_anyway(trainer: Trainer) -> bool:
    """Whether Lightning's own schedule validates after the batch just trained (every ``val_check_batch``)."""
    loop = trainer.fit_loop.epoch_loop
    every = trainer.val_check_batch
    if not isinstance(every, int) or every <= 0:
        return loop.batch_progress.is_last_batch
    iteration = loop.total_batch_idx if trainer.check_val_every_n_epoch is None else loop.batch_idx
    return (iteration + 1) % every == 0


def is_last_step(trainer: Trainer) -> bool:
    """Whether the optimizer step just taken is the run's last (by ``max_steps``, or the last epoch's last batch)."""
    if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    epoch_loop = trainer.fit_loop.epoch_loop
    last_epoch = trainer.max_epochs is not None and trainer.max_epochs != -1 and \
        trainer.current_epoch + 1 >= trainer.max_epochs
    return trainer.max_steps == -1 and last_epoch and epoch_loop.batch_progress.is_last_batch


def final_validation_notice(trainer: Trainer) -> str | None:
    """What lintf adds to the run's validations (its last step), or None when Lightning validates there anyway."""
    interval = trainer.val_check_interval
    if trainer.limit_val_batches == 0 or trainer.max_steps == -1 or not isinstance(interval, int):
        return None
    if trainer.max_steps % interval == 0:
        return None
    return (f"lintf: validating every {interval} steps, this {trainer.max_steps}-step run also validates at its "
            f"last step, {trainer.max_steps}")
