"""Synthetic copy task (Katharopoulos et al. 2020, section 4.1.1): symbols, a separator, the copy."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from lintf.data.synthetic_sequences import Draw, SyntheticSequenceData

PAD, SEP = 0, 1
FIRST_SYMBOL = 2


def copy_sequence(
    n_symbols: int, max_length: int, min_copy_length: int, max_copy_length: int, seed: int
) -> dict[str, Tensor]:
    """One sequence ``s SEP s PAD...`` of ``max_length`` tokens, fully determined by ``seed``.

    Returns:
        ``{"tokens": (max_length,) int64, "length": the length L of s as a 0-d int64 tensor}``.
    """
    generator = torch.Generator().manual_seed(seed)
    length = torch.randint(min_copy_length, max_copy_length + 1, (), generator=generator)
    symbols = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + n_symbols, (int(length),), generator=generator)
    tokens = torch.full((max_length,), PAD, dtype=torch.int64)
    tokens[:length] = symbols
    tokens[length] = SEP
    tokens[length + 1 : 2 * length + 1] = symbols
    return {"tokens": tokens, "length": length}


class CopyData(SyntheticSequenceData):
    """Seeded synthetic sequences for the copy task: ``s_1..s_L SEP s_1..s_L PAD...``.

    Token ids: 0 is padding, 1 the separator, 2.. the symbols. A model reads ``tokens[:-1]`` and
    predicts ``tokens[1:]``; only the copied half is scored.

    Args:
        n_symbols: number of distinct symbols.
        max_length: tokens per sequence (symbols, separator, copy and padding).
        min_copy_length: shortest L; at least 1.
        max_copy_length: longest L; None uses the longest that fits, (max_length - 1) // 2.
        batch_size: sequences per batch (per device).
        train_size: training sequences per epoch.
        val_size: validation sequences.
        test_size: test sequences.
        predict_size: sequences to copy with ``lintf predict``.
        seed: seed of the data; independent of the model's ``seed_everything``.
        num_workers: DataLoader worker processes (each sequence is drawn when read; 0 is usually fastest).
    """

    def __init__(
        self,
        n_symbols: int = 10,
        max_length: int = 128,
        min_copy_length: int = 1,
        max_copy_length: int | None = None,
        batch_size: int = 64,
        train_size: int = 64_000,
        val_size: int = 1024,
        test_size: int = 1024,
        predict_size: int = 256,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        longest = (max_length - 1) // 2
        max_copy_length = longest if max_copy_length is None else max_copy_length
        if n_symbols < 1:
            raise ValueError(f"CopyData: n_symbols must be >= 1, got {n_symbols}")
        if not 1 <= min_copy_length <= max_copy_length <= longest:
            raise ValueError(
                f"CopyData: need 1 <= min_copy_length ({min_copy_length}) <= max_copy_length ({max_copy_length}) "
                f"<= (max_length - 1) // 2 = {longest}, so that s SEP s fits in max_length={max_length}"
            )
        super().__init__(batch_size, train_size, val_size, test_size, predict_size, seed, num_workers)
        self.save_hyperparameters()
        self.n_symbols, self.max_length = n_symbols, max_length
        self.min_copy_length, self.max_copy_length = min_copy_length, max_copy_length

    @property
    def vocab_size(self) -> int:
        """Padding, separator and the symbols; linked to the model's ``vocab_size``."""
        return self.n_symbols + FIRST_SYMBOL

    def draw(self) -> Draw:
        """``copy_sequence`` with this data's symbols and lengths."""
        return partial(copy_sequence, self.n_symbols, self.max_length, self.min_copy_length, self.max_copy_length)
