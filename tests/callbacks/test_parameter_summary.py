"""ParameterSummary: Lightning's model summary without the FLOPs column, in place of Lightning's default."""

from __future__ import annotations

import logging

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary
from torch.utils.data import DataLoader, TensorDataset

from lintf.run.callbacks.parameter_summary import ParameterSummary, with_parameter_summary


class TinyModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def summary_printed(callback: ModelSummary, tmp_path) -> str:
    """What ``callback`` logs when a one-step fit starts."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("lightning.pytorch.callbacks.model_summary")
    logger.addHandler(handler)
    try:
        trainer = Trainer(max_steps=1, callbacks=[callback], logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, default_root_dir=tmp_path)
        trainer.fit(TinyModel(), DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2))
    finally:
        logger.removeHandler(handler)
    return "\n".join(record.getMessage() for record in records)


def test_the_table_has_no_flops(tmp_path):
    lightning = summary_printed(ModelSummary(), tmp_path)  # the reference: Lightning's own has the column
    assert "FLOPs" in lightning and "Total Flops" in lightning
    ours = summary_printed(ParameterSummary(), tmp_path)
    assert "FLOPs" not in ours and "Flops" not in ours
    header = ours.strip().splitlines()[0]
    assert [cell.strip() for cell in header.split("|")] == ["", "Name", "Type", "Params", "Mode"]
    assert "| layer | Linear | 8      | train" in ours and ours.rstrip().endswith("Modules in eval mode")


@pytest.mark.parametrize("options", [{"enable_model_summary": False}, {"barebones": True},
                                     {"callbacks": [ModelSummary(max_depth=2)]}])
def test_a_summary_turned_off_or_chosen_stays_so(options):
    assert with_parameter_summary(options, ["x"]) == (options, ["x"])


def test_the_default_summary_is_replaced():
    options, callbacks = with_parameter_summary({"max_steps": 1}, ["x"])
    assert options == {"max_steps": 1, "enable_model_summary": False}
    assert callbacks[0] == "x" and isinstance(callbacks[1], ParameterSummary) and len(callbacks) == 2
