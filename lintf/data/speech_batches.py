"""Length-bucketed batches of utterances, padded, with lengths: the speech collate function."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of utterances of similar duration (little padding), in random order each epoch.

    Utterances are sorted by duration and cut into consecutive batches of ``batch_size``; with
    ``shuffle`` the batch order (not the batches' members) changes every epoch.

    Args:
        durations: seconds per utterance, indexed like the dataset.
        batch_size: utterances per batch.
        shuffle: reshuffle the batch order every epoch.
        seed: seed of the shuffling; epoch e uses seed + e.
    """

    def __init__(self, durations: Sequence[float], batch_size: int, shuffle: bool, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        order = sorted(range(len(durations)), key=lambda i: durations[i])
        self.batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self.batches)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
            self.epoch += 1
        return iter(batches)


def pad_batch(items: list[dict]) -> dict[str, Tensor | list]:
    """Collate utterances into padded tensors.

    Returns:
        ``features`` (B, T, n_mels) zero-padded, ``feature_lengths`` (B,), ``targets`` (B, S)
        label ids padded with 0 (the blank; CTC reads only ``target_lengths`` of each row),
        ``target_lengths`` (B,), and the lists ``text`` and ``audio_filepath``.
    """
    feature_lengths = torch.tensor([item["features"].shape[0] for item in items])
    target_lengths = torch.tensor([len(item["targets"]) for item in items])
    features = torch.zeros(len(items), int(feature_lengths.max()), items[0]["features"].shape[1])
    targets = torch.zeros(len(items), max(int(target_lengths.max()), 1), dtype=torch.long)
    for i, item in enumerate(items):
        features[i, : feature_lengths[i]] = item["features"]
        targets[i, : target_lengths[i]] = item["targets"]
    return {
        "features": features, "feature_lengths": feature_lengths, "targets": targets,
        "target_lengths": target_lengths, "text": [item["text"] for item in items],
        "audio_filepath": [item["audio_filepath"] for item in items],
    }
