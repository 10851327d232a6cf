"""The run's checkpoints: ``best.ckpt`` by the monitored metric and a ``last.ckpt`` that is really the last."""

from __future__ import annotations

import os
import warnings
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, with ``last.ckpt`` rewritten after every validation of ``fit``.

    Lightning writes ``save_last`` only when a top-k checkpoint was written at the same step, so after
    a validation whose monitored metric did not improve, ``last.ckpt`` would still hold an older state
    and ``--ckpt_path last`` would repeat the work since then. Here it always holds the newest one.
    A run stopped by SIGTERM (a scheduler's preemption, ``kill``) saves ``last.ckpt`` before it exits, so
    ``--ckpt_path last`` continues from the step it reached. The arguments are ``ModelCheckpoint``'s.

    The checkpoint folder is recorded as an absolute path, so a later command that continues the run
    (from any working directory) finds its own folder in the checkpoint and restores the best score; a
    checkpoint from another folder, which starts a new run directory, restores none of it.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            # Every new run has a fresh directory: a folder with checkpoints in it is the run being continued.
            warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
            super().setup(trainer, pl_module, stage)
        if self.dirpath and "://" not in str(self.dirpath):
            self.dirpath = os.path.abspath(self.dirpath)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and os.path.realpath(saved) != os.path.realpath(self.dirpath):
            return  # a checkpoint from elsewhere starts a new run directory: its best score and files are another run's
        super().load_state_dict({**state_dict, "dirpath": self.dirpath or saved})

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning raises SIGTERMException between two training batches, after an optimizer step: the state
        # is whole. Every rank received the signal (Lightning broadcasts it), so all take part in the save.
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        if not self.save_last or not self.dirpath or trainer.sanity_checking:
            return
        self._save_last(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        top_k_before = (dict(self.best_k_models), self.best_model_path)
        super().on_validation_end(trainer, pl_module)
        if not self.save_last or not self.dirpath or trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        # A top-k save at this step wrote last.ckpt too. The test is the same on every rank (the top-k
        # bookkeeping is), so all ranks take part in the save below or none does.
        if (dict(self.best_k_models), self.best_model_path) != top_k_before:
            return
        self._save_last(trainer)

    def _save_last(self, trainer: Trainer) -> None:
        path = os.path.join(self.dirpath, f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}")
        trainer.save_checkpoint(path, self.save_weights_only)
        self.last_model_path = path
