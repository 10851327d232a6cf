"""Documents of a text source, and their token ids packed end to end into full rows with no padding.

A source is a directory of ``.txt`` files (one document each) or one text (a file, or "kjv") cut at a
``document_separator``; a directory's files are cut at the separator too when one is given. The
documents of a part are laid end to end; row j holds the inputs ``tokens[jT : jT + T]`` and their
next tokens, with the boundaries of the documents inside it (``cu_seqlens``, starting at 0 and
ending at T: a document cut by a row's start restarts there). A target that is the first token of a
document is not predicted (``IGNORE``): it would be predicted from the last token of the previous one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from lintf.data.image_sources import DataSourceError
from lintf.data.text_sources import read_text_file, read_text_source

IGNORE = -100
"""The target of a position whose next token starts another document (``F.cross_entropy``'s ignore_index)."""


def read_documents(path: str, data_dir: Path, separator: str | None) -> list[str]:
    """The non-empty documents of ``path``: each ``.txt`` file of a directory, or a text cut at ``separator``.

    Args:
        path: a directory of ``.txt`` files, a UTF-8 text file, or "kjv".
        data_dir: where a fetched corpus is kept.
        separator: the string between two documents; None: each file of a directory is one document.
    """
    source = Path(path).expanduser()
    if source.is_dir():
        files = sorted(p for p in source.rglob("*.txt") if p.is_file())
        if not files:
            raise DataSourceError(f"the directory {source} holds no .txt file; packed documents are the .txt files "
                                  "of a directory (one document each), or one text file cut at document_separator")
        texts = [read_text_file(p) for p in files]
        where = f"any of the {len(files)} .txt files of {source}"
    elif separator is None:
        raise ValueError(f"{path!r} is one text, so one document; give document_separator (the string between two "
                         "documents, e.g. \"\\n\\n\"), or a directory of .txt files, one document each")
    else:
        texts, where = [read_text_source(path, data_dir)], repr(path)
    if separator is None:
        return texts
    if separator == "":
        raise ValueError("document_separator must be a non-empty string (e.g. \"\\n\\n\"), or null for one document "
                         "per .txt file of a directory")
    if not any(separator in text for text in texts):
        raise ValueError(f"document_separator {separator!r} is never found in {where}; give the string that "
                         "separates its documents, or null with a directory (one document per .txt file)")
    return [doc for text in texts for doc in text.split(separator) if doc.strip()]


def split_documents(documents: list[str], val_fraction: float, test_fraction: float) -> dict[str, list[str]]:
    """The documents in order: the first for training, then validation, then test (at least one each)."""
    count = len(documents)
    if count < 3:
        raise ValueError(f"{count} document{'' if count == 1 else 's'} found; the train, validation and test parts "
                         "need one document each: give at least 3")
    n_val, n_test = max(1, round(count * val_fraction)), max(1, round(count * test_fraction))
    if n_val + n_test >= count:  # few documents: one each for validation and test
        n_val = n_test = 1
    n_train = count - n_val - n_test
    return {"train": documents[:n_train], "val": documents[n_train : n_train + n_val],
            "test": documents[n_train + n_val :]}


def lay_end_to_end(documents: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Token ids (L,) of the documents end to end, and (L,) bool True at each document's first token."""
    tokens = torch.tensor([t for doc in documents for t in doc], dtype=torch.long)
    starts = torch.zeros(tokens.numel(), dtype=torch.bool)
    offsets = torch.tensor([0, *[len(doc) for doc in documents[:-1]]]).cumsum(0)
    starts[offsets[offsets < tokens.numel()]] = True
    return tokens, starts


class PackedRows(Dataset):
    """Rows of T inputs and T targets cut from documents laid end to end, with each row's document boundaries.

    Args:
        tokens: (L,) the token ids of a part, documents end to end.
        starts: (L,) bool, True at each document's first token.
        length: T, inputs per row; row j reads tokens jT .. jT + T (its last token is the last target).
    """

    def __init__(self, tokens: Tensor, starts: Tensor, length: int) -> None:
        self.tokens, self.starts, self.length = tokens, starts, length

    def __len__(self) -> int:
        return (self.tokens.numel() - 1) // self.length

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        first, length = index * self.length, self.length
        window, starts = self.tokens[first : first + length + 1], self.starts[first : first + length + 1]
        inside = starts[1:length].nonzero().flatten() + 1  # document starts after the row's first input
        boundaries = torch.cat([torch.zeros(1, dtype=torch.long), inside, torch.tensor([length])])
        return {"inputs": window[:-1], "targets": window[1:].masked_fill(starts[1:], IGNORE),
                "boundaries": boundaries, "start": torch.tensor(first)}


def collate_rows(rows: list[dict[str, Tensor]], characters: Callable[[Tensor], int] | None = None) -> dict[str, Tensor]:
    """B rows as one packed row (1, B*T) and the boundaries of every document piece in it (``cu_seqlens``).

    Args:
        rows: items of ``PackedRows``.
        characters: how many characters token ids (1-D) stand for; given, the batch counts each row's predicted
            characters (``characters`` (B,)).

    Returns:
        ``inputs`` and ``targets`` (1, B*T), ``cu_seqlens`` (D + 1,) int32, ``start`` (B,) and ``characters`` (B,).
    """
    length = rows[0]["inputs"].numel()
    cuts = [row["boundaries"][:-1] + index * length for index, row in enumerate(rows)]
    cu_seqlens = torch.cat([*cuts, torch.tensor([len(rows) * length])]).to(torch.int32)
    batch = {"inputs": torch.cat([row["inputs"] for row in rows])[None],
             "targets": torch.cat([row["targets"] for row in rows])[None],
             "cu_seqlens": cu_seqlens, "start": torch.stack([row["start"] for row in rows])}
    if characters is not None:
        batch["characters"] = torch.tensor([characters(row["targets"][row["targets"] != IGNORE]) for row in rows])
    return batch
