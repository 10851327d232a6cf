"""The part every lintf data module shares: four loaders that differ only in the split they read."""

from __future__ import annotations

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader


class SplitDataModule(LightningDataModule):
    """A LightningDataModule whose train/val/test/predict loaders come from one ``loader(split)``.

    Subclasses implement ``loader`` (shuffling only the "train" split) and may point
    ``predict_split`` at another split (image generation predicts from "test").
    """

    predict_split = "predict"

    def loader(self, split: str) -> DataLoader:
        """The DataLoader of ``split`` ("train", "val", "test" or ``predict_split``)."""
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        return self.loader("train")

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self.loader(self.predict_split)
