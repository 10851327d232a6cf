"""PackedTextData: documents packed into full rows, their boundaries given, no target across a document start."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from lintf.data import PackedTextData
from lintf.data.image_sources import DataSourceError
from lintf.data.text_documents import IGNORE

SENTENCES = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void.",
    "Call me Ishmael.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Happy families are all alike; every unhappy family is unhappy in its own way.",
    "Whan that Aprill with his shoures soote.",
    "The sun shone, having no alternative, on the nothing new.",
    "All this happened, more or less.",
]


def write_documents(root: Path, documents: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for index, text in enumerate(documents):
        (root / f"{index:03d}.txt").write_text(text)
    return root


def documents_of(count: int) -> list[str]:
    """``count`` documents of different lengths, each naming itself so no two share a long piece."""
    return [f"<{i}> " + " ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(1 + i % 3)) for i in range(count)]


def data(path, **options) -> PackedTextData:
    settings = {"segment_length": 32, "batch_size": 3, "eval_length": 40, "eval_batch_size": 2, "val_fraction": 0.1,
                    "test_fraction": 0.1}
    settings.update(options)
    module = PackedTextData(path=str(path), **settings)
    return module


def pieces(batch, decode):
    """Each document piece of a packed batch: (its text, its targets, whether it starts at a row start)."""
    bounds, row = batch["cu_seqlens"].tolist(), batch["inputs"].shape[1] // batch["start"].numel()
    inputs, targets = batch["inputs"][0], batch["targets"][0]
    return [(decode(inputs[a:b].tolist()), targets[a:b], a % row == 0) for a, b in itertools.pairwise(bounds)]


def test_a_directory_packs_full_rows_of_single_document_pieces(tmp_path):
    documents = documents_of(30)
    module = data(write_documents(tmp_path / "docs", documents), document_separator=None)
    decode = module.tokenizer.decode
    batch = next(iter(module.train_dataloader()))
    assert batch["inputs"].shape == batch["targets"].shape == (1, 3 * 32)  # 3 rows, no padding
    bounds = batch["cu_seqlens"]
    assert bounds.dtype == torch.int32 and bounds[0] == 0 and bounds[-1] == 96
    assert {0, 32, 64} <= set(bounds.tolist())  # every row starts a piece
    starts_seen = 0
    for text, targets, at_row_start in pieces(batch, decode):
        owners = [doc for doc in documents if text in doc]
        assert owners, f"{text!r} spans two documents"
        if not at_row_start:  # a boundary inside a row is a document's start
            assert any(doc.startswith(text) for doc in owners)
            starts_seen += 1
        if (targets == IGNORE).any():  # only the last target may start the next document
            assert (targets == IGNORE).nonzero().flatten().tolist() == [len(targets) - 1]
            assert any(doc.endswith(text) for doc in owners)
    assert starts_seen > 0


def test_the_targets_are_the_next_tokens_of_the_same_document(tmp_path):
    documents = documents_of(12)
    module = data(write_documents(tmp_path / "docs", documents), document_separator=None)
    train = module.documents["train"]
    stream = "".join(train)
    document_starts = {len("".join(train[:i])) for i in range(len(train))}
    for batch in module.train_dataloader():
        rows_inputs, rows_targets = batch["inputs"].view(-1, 32), batch["targets"].view(-1, 32)
        for start, row_inputs, row_targets in zip(batch["start"].tolist(), rows_inputs, rows_targets):
            assert module.tokenizer.decode(row_inputs.tolist()) == stream[start : start + 32]
            for t in range(32):
                if start + t + 1 in document_starts:
                    assert row_targets[t] == IGNORE
                else:
                    assert module.tokenizer.decode([int(row_targets[t])]) == stream[start + t + 1]


def test_one_file_is_cut_at_the_separator(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(documents_of(20)))
    module = data(path, document_separator="\n\n")
    assert sum(len(docs) for docs in module.documents.values()) == 20
    assert all("\n\n" not in doc for docs in module.documents.values() for doc in docs)
    batch = next(iter(module.val_dataloader()))
    assert batch["characters"].tolist() == (batch["targets"] != IGNORE).view(-1, 40).sum(1).tolist()


def test_bad_sources_say_what_is_wrong(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataSourceError, match="holds no .txt file"):
        _ = data(tmp_path / "empty", document_separator=None).documents
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(documents_of(5)))
    with pytest.raises(ValueError, match=r"document_separator '<\|endoftext\|>' is never found in"):
        _ = data(path, document_separator="<|endoftext|>").documents
    with pytest.raises(ValueError, match="is one text, so one document; give document_separator"):
        _ = data(path, document_separator=None).documents
    with pytest.raises(ValueError, match="2 documents found; .* give at least 3"):
        _ = data(write_documents(tmp_path / "two", documents_of(2)), document_separator=None).documents
    with pytest.raises(ValueError, match="non-empty string"):
        data(path, document_separator="")
    short = data(write_documents(tmp_path / "short", documents_of(3)), document_separator=None, segment_length=500)
    with pytest.raises(ValueError, match="fewer than batch_size=3 rows of segment_length=500"):
        short.train_dataloader()
