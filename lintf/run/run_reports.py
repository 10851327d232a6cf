"""What ``lintf`` tells the user about a run's files: its directory, its checkpoints, what a stopped run kept."""

from __future__ import annotations

import os

from lightning.pytorch import Trainer
from lightning.pytorch.utilities import rank_zero_only

from lintf.layout.directories import run_directory
from lintf.run.threads import say_thread_notice


def say_run_directory(trainer: Trainer) -> None:
    """Print ``run directory: <absolute path>``, where the run's files go. Call on every rank (rank 0 prints)."""
    directory = run_directory(trainer)  # on every rank: it broadcasts rank 0's
    if rank_zero_only.rank == 0:  # set from the environment before the trainer knows its rank
        print(f"run directory: {directory}", flush=True)
        say_thread_notice()


def say_checkpoints(trainer: Trainer) -> None:
    """Print the best checkpoint (with its score) and the last one, those that exist, on rank 0."""
    callback = trainer.checkpoint_callback
    if callback is None or not trainer.is_global_zero:
        return
    lines = []
    if os.path.isfile(getattr(callback, "best_model_path", "") or ""):
        score = callback.best_model_score
        lines.append(f"best checkpoint: {callback.best_model_path}"
                     + (f" ({callback.monitor} {float(score):.4g})" if score is not None else ""))
    if os.path.isfile(getattr(callback, "last_model_path", "") or ""):
        lines.append(f"last checkpoint: {callback.last_model_path}")
    if lines:
        print("\n".join(lines), flush=True)


def stopped_report(trainer: Trainer, signal_name: str = "SIGTERM") -> str:
    """What a run stopped by a signal (SIGTERM, or Ctrl-C's SIGINT) reached and kept."""
    last = getattr(trainer.checkpoint_callback, "last_model_path", "") or ""
    kept = (f"saved {last}; continue with the same command and --ckpt_path last" if os.path.isfile(last)
            else "no checkpoint was saved (checkpointing is off)")
    return f"stopped by {signal_name} at step {trainer.global_step}: {kept}"
