"""Language modelling over documents packed into full rows: no padding, and no token reads another document.

The documents (``lintf.data.text_documents``: the ``.txt`` files of a directory, or one text cut at
``document_separator``) are split in order into training, validation and test documents, tokenized as
``TextStreamData`` does, laid end to end and cut into rows of ``segment_length`` inputs (``eval_length``
for validation and test). A batch of B rows is one packed row (1, B*T) with ``cu_seqlens``, the
boundaries of every document piece in it, so the model restarts its state and positions at each
document start (``lintf.attention.base``, packed documents); targets that begin a document are not
predicted (``IGNORE``). The stream-LM task trains on these batches.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from lintf.data.notices import notice
from lintf.data.text_documents import (
    PackedRows,
    collate_rows,
    lay_end_to_end,
    read_documents,
    split_documents,
)
from lintf.data.text_stream import UNITS, TextStreamData, TokenizerName


class PackedTextData(TextStreamData):
    """Documents packed into full rows of the training length, with their boundaries given to the model.

    Args:
        path: a directory of ``.txt`` files (one document each, read in sorted order), a UTF-8 text file, or
            "kjv" (the King James Bible); a file is cut into documents at ``document_separator``.
        document_separator: the string between two documents (YAML "\\n\\n" for blank lines, "\\n" for one
            document per line); null: each ``.txt`` file of the ``path`` directory is one document.
        tokenizer: "char", "bytes" or "bpe", as ``TextStreamData``.
        vocab_size: tokens of a bpe tokenizer trained on the training documents (> 256).
        tokenizer_file: a Hugging Face ``tokenizer.json`` to read the text with (``tokenizer: bpe``).
        data_dir: where a fetched corpus is kept.
        segment_length: T, inputs per training row; documents fill rows end to end.
        batch_size: training rows per batch and process, packed into one row of B*T positions.
        eval_length: inputs per validation / test row (reduced to fit a short part, with a notice).
        eval_batch_size: rows per validation / test batch.
        val_fraction: share of the documents (after the training ones) used for validation (at least one).
        test_fraction: share of the documents (at the end) used for testing (at least one).
        limit_characters: use only the documents within the first this many characters (quick runs); None: all.
    """

    def __init__(
        self,
        path: str = "kjv",
        document_separator: str | None = "\n",
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
        super().__init__(path, tokenizer, vocab_size, tokenizer_file, data_dir, segment_length, batch_size,
                         eval_length, eval_batch_size, val_fraction, test_fraction, limit_characters)
        if document_separator == "":
            raise ValueError("PackedTextData: document_separator must be a non-empty string (e.g. \"\\n\\n\"), or "
                             "null for one document per .txt file of a directory")
        self.save_hyperparameters(ignore=["vocab_size"])
        self._documents: dict[str, list[str]] | None = None
        self._packed: dict[str, tuple[Tensor, Tensor]] | None = None

    def prepare_data(self) -> None:
        read_documents(self.hparams.path, self.data_dir, self.hparams.document_separator)

    @property
    def documents(self) -> dict[str, list[str]]:
        """The train, val and test documents, in the source's order."""
        if self._documents is None:
            documents = read_documents(self.hparams.path, self.data_dir, self.hparams.document_separator)
            limit = self.hparams.limit_characters
            if limit is not None:
                ends = torch.tensor([len(doc) for doc in documents]).cumsum(0)
                documents = documents[: max(3, int((ends <= limit).sum()))]
            self._documents = split_documents(documents, self.hparams.val_fraction, self.hparams.test_fraction)
        return self._documents

    @property
    def texts(self) -> dict[str, str]:
        """The train, val and test documents, each part's joined (for building a tokenizer)."""
        return {part: "".join(documents) for part, documents in self.documents.items()}

    def use_tokenizer(self, tokenizer) -> None:
        super().use_tokenizer(tokenizer)
        self._packed = None

    def packed(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Each part's token ids, documents end to end (L,), and (L,) bool marking each document's first token."""
        if self._packed is None:
            encode = self.tokenizer.encode
            self._packed = {part: lay_end_to_end([encode(doc) for doc in docs]) for part, docs in
                            self.documents.items()}
        return self._packed

    def part_tokens(self) -> dict[str, Tensor]:
        return {part: tokens for part, (tokens, _) in self.packed().items()}

    def row_length(self, split: str) -> int:
        """Inputs per row of ``split``: segment_length for training, eval_length (fitted to the part) otherwise."""
        count, unit = self.packed()[split][0].numel(), UNITS[self.tokenizer.kind]
        rows = self.hparams.batch_size if split == "train" else 1
        if split == "train":
            if (count - 1) // self.hparams.segment_length < rows:
                raise ValueError(
                    f"PackedTextData: the training documents of {self.describe()} hold {count} {unit}, fewer than "
                    f"batch_size={rows} rows of segment_length={self.hparams.segment_length} (+1 target); give "
                    "more documents, or lower batch_size or segment_length")
            return self.hparams.segment_length
        if count < 2:
            raise ValueError(f"PackedTextData: the {split} documents of {self.describe()} hold {count} {unit}; a row "
                             "needs at least 2 (an input and its next token); give longer documents")
        length = min(self.hparams.eval_length, count - 1)
        if length < self.hparams.eval_length and f"{split} length" not in self._noticed:
            self._noticed.add(f"{split} length")
            notice(f"the {split} documents of {self.describe()} hold {count} {unit}: eval_length "
                   f"{self.hparams.eval_length} -> {length} to fit them")
        return length

    def loader(self, split: str) -> DataLoader:
        tokens, starts = self.packed()[split]
        rows = PackedRows(tokens, starts, self.row_length(split))
        if split == "train":
            self.fit_validation_interval(len(rows) // self.hparams.batch_size)
            return DataLoader(rows, batch_size=self.hparams.batch_size, shuffle=True, drop_last=True,
                              collate_fn=collate_rows)
        return DataLoader(rows, batch_size=self.hparams.eval_batch_size,
                          collate_fn=partial(collate_rows, characters=self.characters))
