"""The root of every lintf task: a registry-built TransformerEncoder, its optimizer and schedule.

A task is composed of a front end (token embedding + positions, a speech front end, ...), the
encoder described by one ``EncoderConfig`` (``model.encoder`` in YAML) and a head. Tasks add their
loss, metrics and ``predict_step``; ``--model.encoder.attention`` switches the attention of every
task without touching code.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from lintf.layout.checkpoint_version import FORMAT
from lintf.models.encoder_config import EncoderConfig
from lintf.models.transformer import TransformerEncoder
from lintf.tasks.decoding import Decoding


class TransformerTask(LightningModule):
    """A LightningModule around a registry-built encoder; subclasses add the front end, head and loss.

    Args:
        encoder: the encoder stack (width, depth, attention and feature map by registry name, ...).
        optimizer: optimizer class and arguments, e.g. ``{class_path: torch.optim.RAdam, init_args: {lr: 1e-3}}``.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
    """

    decoding_class: type[Decoding] | None = None
    """The ``Decoding`` subclass that ``--decoding`` takes for this task; None: the task takes none."""

    def __init__(
        self,
        encoder: EncoderConfig = EncoderConfig(),
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        super().__init__()
        self.encoder_config = EncoderConfig.coerce(encoder)
        # Every subclass's arguments (Lightning collects them up the __init__ frames); the encoder as plain
        # data, so checkpoints load with weights_only=True.
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        self.hparams["encoder"] = self.encoder_config.to_dict()
        self.optimizer_factory, self.lr_scheduler_factory = optimizer, lr_scheduler
        self.encoder = TransformerEncoder(self.encoder_config)

    @property
    def d_model(self) -> int:
        """Width of the encoder."""
        return self.encoder_config.d_model

    @property
    def attached_datamodule(self) -> LightningDataModule | None:
        """The data module of the Trainer running this task; None outside a Trainer or without a data module."""
        try:
            trainer = self.trainer
        except RuntimeError:  # LightningModule.trainer raises while no Trainer is attached
            return None
        return getattr(trainer, "datamodule", None)

    def use_decoding(self, decoding: Decoding) -> None:
        """Decode test and predict batches with ``decoding``; tasks with a ``decoding_class`` override this."""
        raise ValueError(f"{type(self).__name__} takes no decoding options, but --decoding gave "
                         f"{type(decoding).__name__}; remove decoding from the command line or config")

    def build_metrics(self) -> None:
        """Create the task's torchmetrics modules (subclasses call it at the end of ``__init__``)."""

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.lr_scheduler_factory is None:
            return optimizer
        scheduler = self.lr_scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lintf_task"] = f"{type(self).__module__}.{type(self).__qualname__}"
        checkpoint["lintf_format"] = FORMAT
