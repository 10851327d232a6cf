"""Length-bucketed batches of utterances, padded, with lengths: the speech collate function."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import BatchSampler, Sampler


class BucketBatchSampler(BatchSampler):
    """Batches of utterances of similar duration (little padding), in random order each epoch.

    The indices ``sampler`` yields (all of them, or under DDP the shard Lightning's
    ``DistributedSampler`` gives this rank) are sorted by duration and cut into consecutive
    batches of ``batch_size``; with ``shuffle`` the batch order changes every epoch. It follows
    ``BatchSampler``'s API, so Lightning can swap in the distributed sampler: every rank then gets
    the same number of batches (the distributed sampler pads its shards to equal size).

    Args:
        sampler: the utterance indices to batch.
        batch_size: utterances per batch.
        drop_last: drop a final batch smaller than ``batch_size``.
        durations: seconds per utterance, indexed like the dataset.
        shuffle: reshuffle the batch order every epoch.
        seed: seed of the shuffling; epoch e uses seed + e (``set_epoch`` or one more per pass).
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool = False,
                 durations: Sequence[float] = (), shuffle: bool = False, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        super().__init__(sampler, batch_size, drop_last)
        self.durations, self.shuffle, self.seed, self.epoch = list(durations), shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        count = len(self.sampler)  # type: ignore[arg-type]
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = sorted(self.sampler, key=lambda i: self.durations[i])
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
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
