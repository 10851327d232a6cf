"""The stream-LM task on packed documents: its loss is that of each document piece read alone."""

from __future__ import annotations

import itertools

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

from lintf.data import PackedTextData
from lintf.data.text_documents import IGNORE, PackedRows, collate_rows, lay_end_to_end
from lintf.models import EncoderConfig
from lintf.tasks import StreamLanguageModelTask
from tests.data.test_packed_text import documents_of, write_documents

HYBRID = EncoderConfig(d_model=16, n_layers=2, n_heads=2, dropout=0.0, attention=["gated_delta_net", "softmax"],
                       layer=["recipe", "projections"])


def packed_batch(vocab: int = 9, row: int = 12, rows: int = 3):
    generator = torch.Generator().manual_seed(0)
    documents = [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in (5, 17, 2, 9, 4)]
    tokens, starts = lay_end_to_end(documents)
    dataset = PackedRows(tokens, starts, row)
    return collate_rows([dataset[i] for i in range(rows)])


def test_the_packed_loss_is_the_loss_of_each_document_piece_alone():
    torch.manual_seed(0)
    task = StreamLanguageModelTask(vocab_size=9, max_length=32, encoder=HYBRID, positions="learned",
                                   between_segments="reset").double()
    batch = packed_batch()
    loss = task.training_step(batch, 0)
    bounds = batch["cu_seqlens"].tolist()
    total, count = 0.0, 0
    with torch.no_grad():
        for start, stop in itertools.pairwise(bounds):
            targets = batch["targets"][0, start:stop]
            logits = task(batch["inputs"][:, start:stop])[0]  # the piece alone, positions from 0
            kept = targets != IGNORE
            total += float(F.cross_entropy(logits[kept], targets[kept], reduction="sum"))
            count += int(kept.sum())
    assert count < batch["targets"].numel()  # some targets begin a document and are not predicted
    assert float(loss.detach()) == pytest.approx(total / count, rel=1e-6)


def test_a_packed_fit_trains_validates_and_tests(tmp_path):
    data = PackedTextData(path=str(write_documents(tmp_path / "docs", documents_of(30))), document_separator=None,
                          segment_length=24, batch_size=2, eval_length=48, val_fraction=0.1, test_fraction=0.1)
    task = StreamLanguageModelTask(vocab_size=data.vocab_size, max_length=data.max_length, encoder=HYBRID,
                                   between_segments="reset")
    trainer = pl.Trainer(max_steps=3, limit_val_batches=1, limit_test_batches=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(task, datamodule=data)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    metrics = trainer.test(task, datamodule=data, verbose=False)[0]
    assert 0 < metrics["test/bits_per_char"] < 10
