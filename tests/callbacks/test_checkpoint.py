"""RunCheckpoint: last.ckpt holds the newest validated state even when the monitored metric got worse."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from lintf.run.callbacks import RunCheckpoint


class WorseningModel(LightningModule):
    """A linear model whose validation loss is the global step: every validation after the first is worse."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", float(self.global_step))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_last_checkpoint_is_the_newest_validation_not_the_best(tmp_path):
    data = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=2)
    checkpoint = RunCheckpoint(dirpath=tmp_path, filename="best", monitor="val/loss", save_top_k=1, save_last=True)
    trainer = Trainer(max_steps=6, val_check_interval=2, limit_val_batches=1, callbacks=[checkpoint], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(WorseningModel(), train_dataloaders=data, val_dataloaders=data)
    assert torch.load(tmp_path / "best.ckpt", weights_only=True)["global_step"] == 2
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 6
    assert checkpoint.last_model_path == str(tmp_path / "last.ckpt")
