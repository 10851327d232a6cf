"""Stop a diverging run at its first non-finite loss or gradient, before it is saved or labelled best."""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class NonFiniteError(RuntimeError):
    """Training met a NaN or infinite loss or gradient; the message says where and what to try."""


ADVICE = ("Try a lower learning rate (model.optimizer.init_args.lr), gradient clipping (--trainer.gradient_clip_val "
          "1.0), a warm-up (model.lr_scheduler), or --trainer.precision 32-true instead of a 16-bit precision; if a "
          "batch's data holds NaN or infinite values, fix the data.")


class StopOnNonFinite(Callback):
    """Raises NonFiniteError at the first non-finite training loss, gradient or monitored validation metric.

    The loss is checked before its backward and the gradients before the optimizer step, so no weight is
    ever updated with a NaN; a non-finite validation metric stops the run before the checkpoint callback
    runs, so it is never saved as best and ``last.ckpt`` keeps the last finite state. Under a GradScaler
    (``16-mixed``), infinite gradients are the scaler's business (it skips those steps) and are not checked.
    """

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        if not bool(torch.isfinite(loss.detach()).all()):
            raise NonFiniteError(self.report(trainer, f"the training loss is {float(loss.detach().float().sum())}"))

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            return
        gradients = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if not gradients:
            return
        norms = torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in gradients])
        if not bool(torch.isfinite(norms).all()):
            names = [name for name, p in pl_module.named_parameters() if p.grad is not None]
            bad = [name for name, norm in zip(names, norms.tolist()) if not math.isfinite(norm)]
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            raise NonFiniteError(self.report(trainer, f"the gradient of {', '.join(bad[:3])}{more} is not finite"))

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        callback = trainer.checkpoint_callback
        monitor = getattr(callback, "monitor", None) or "val/loss"
        value = trainer.callback_metrics.get(monitor)
        if value is not None and not math.isfinite(float(value)):
            raise NonFiniteError(self.report(trainer, f"the validation's {monitor} is {float(value)}",
                                             f"the validation after step {trainer.global_step}"))

    @staticmethod
    def report(trainer: Trainer, what: str, where: str | None = None) -> str:
        """One paragraph: where training stopped, what was kept, what to try.

        Args:
            trainer: the trainer.
            what: the value that is not finite.
            where: when it was met; None: the optimizer step being computed.
        """
        batch = trainer.fit_loop.epoch_loop.batch_idx
        where = where or f"step {trainer.global_step + 1} (epoch {trainer.current_epoch}, batch {batch})"
        rates = sorted({group["lr"] for optimizer in trainer.optimizers for group in optimizer.param_groups})
        rate = f" at learning rate {', '.join(f'{lr:.3g}' for lr in rates)}" if rates else ""
        callback = trainer.checkpoint_callback
        last = getattr(callback, "last_model_path", "") or ""
        kept = f"{last} holds the last finite state" if last else "no checkpoint was written"
        return f"training diverged at {where}{rate}: {what}. The run stopped; {kept}. {ADVICE}"
