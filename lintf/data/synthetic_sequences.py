"""Seeded synthetic sequences made on demand, and the data module of the tasks that train on them (copy, MQAR)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from lintf.data.splits import SplitDataModule

SPLITS = ("train", "val", "test", "predict")
Draw = Callable[[int], dict[str, Tensor]]
"""Makes one sequence (a dict of tensors) from its seed: a module-level function or a partial of one (picklable)."""


class SeededSequences(Dataset):
    """``size`` sequences; item i is ``draw(seed * 1_000_003 + i)``.

    Items are made on demand, so any size costs no memory and every epoch sees the same data.

    Args:
        size: number of sequences.
        draw: makes one sequence from its seed.
        seed: seed of this set of sequences.
    """

    def __init__(self, size: int, draw: Draw, seed: int) -> None:
        self.size, self.draw, self.seed = size, draw, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} sequences")
        return self.draw(self.seed * 1_000_003 + index)


class SyntheticSequenceData(SplitDataModule):
    """A data module of seeded synthetic sequences: four splits, each drawn from its own seeds.

    Subclasses check and keep their own arguments, pass these on, call ``save_hyperparameters``
    and say in ``draw`` how one sequence is made.

    Args:
        batch_size: sequences per batch.
        train_size, val_size, test_size, predict_size: sequences in each split, at least one each.
        seed: seed of the data; split s (0 train, 1 val, 2 test, 3 predict) draws from ``4 * seed + s``.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self, batch_size: int, train_size: int, val_size: int, test_size: int, predict_size: int, seed: int,
        num_workers: int,
    ) -> None:
        super().__init__()
        for name, size in (("batch_size", batch_size), ("train_size", train_size), ("val_size", val_size),
                           ("test_size", test_size), ("predict_size", predict_size)):
            if size < 1:
                raise ValueError(f"{type(self).__name__}: {name} must be >= 1, got {size}")
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.sizes = dict(zip(SPLITS, (train_size, val_size, test_size, predict_size)))
        self.datasets: dict[str, SeededSequences] = {}

    def draw(self) -> Draw:
        """The function that makes one sequence of this data from its seed."""
        raise NotImplementedError

    def split(self, name: str) -> SeededSequences:
        """The dataset of split ``name`` ("train", "val", "test" or "predict"), drawn on first use."""
        if name not in self.datasets:
            self.datasets[name] = SeededSequences(
                self.sizes[name], self.draw(), seed=self.seed * len(SPLITS) + SPLITS.index(name)
            )
        return self.datasets[name]

    def loader(self, split: str) -> DataLoader:
        return DataLoader(
            self.split(split), batch_size=self.batch_size, shuffle=split == "train", num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )
