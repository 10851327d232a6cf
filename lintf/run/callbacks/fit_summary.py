"""The closing lines of a ``fit``: steps, time, tokens per second and the last validation's metrics; then, for a
model that writes text, a short sample of it (``fit_sample``); for one that draws images, the path of a small
grid of them saved in the run (``fit_image_sample``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from lintf.run.callbacks.fit_image_sample import fit_image_sample
from lintf.run.callbacks.fit_sample import fit_sample


def tokens_in(batch: Any) -> int:
    """Token ids in a batch: the elements of its first integer tensor of two or more dimensions (B, N, ...)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() if batch.dim() >= 2 and not batch.is_floating_point() else 0
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, list | tuple) else \
        [getattr(batch, name) for name in getattr(batch, "_fields", ())]
    return next((count for count in (tokens_in(value) for value in values) if count), 0)


class FitSummary(Callback):
    """Counts the steps, seconds and tokens of this ``fit``; ``summary`` says them with the validation metrics."""

    def __init__(self) -> None:
        self.start, self.first_step, self.tokens = 0.0, 0, 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start, self.first_step, self.tokens = time.perf_counter(), trainer.global_step, 0

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.tokens += tokens_in(batch)

    def summary(self, trainer: Trainer) -> str | None:
        """``fit: 300 steps in 95.2 s, 12900 tokens/s (validation included); val/loss 1.23, ...``, or None; a text
        model's sample, or an image model's grid, on a second line. Call on rank 0 only (the sample runs the model)."""
        if not self.start:  # no training step ran: a resumed run that had reached its end already
            done = 0 < trainer.max_steps <= trainer.global_step
            return (f"fit: nothing to train, the run had reached max_steps {trainer.max_steps}; train it longer with "
                    f"--trainer.max_steps N (more than {trainer.global_step})") if done else None
        seconds = max(time.perf_counter() - self.start, 1e-9)
        metrics = [f"{name} {float(value):.4g}" for name, value in sorted(trainer.callback_metrics.items())
                   if name.startswith("val/") and torch.as_tensor(value).numel() == 1]
        speed = f", {self.tokens / seconds:.0f} tokens/s (validation included)" if self.tokens else ""
        module = trainer.lightning_module
        sample = (fit_sample(trainer, module) or fit_image_sample(trainer, module)) if module is not None else None
        return (f"fit: {trainer.global_step - self.first_step} steps in {seconds:.1f} s{speed}"
                + (f"; {', '.join(metrics)}" if metrics else "") + (f"\n{sample}" if sample else ""))
