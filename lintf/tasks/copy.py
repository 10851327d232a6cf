"""The copy task (paper 4.1.1): a causal transformer learns to repeat ``s`` after ``s SEP``."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lintf.data.copy import FIRST_SYMBOL
from lintf.generation.sampling import Sampling, complete
from lintf.tasks.autoregressive import AutoregressiveTask


def copied_half(lengths: Tensor, width: int) -> Tensor:
    """Bool mask (B, width) over next-token targets: True where the target is a copied symbol.

    Target j is token j + 1; the copy of ``s`` (length L) occupies tokens L + 1 .. 2L.
    """
    j = torch.arange(width, device=lengths.device)
    return (j >= lengths[:, None]) & (j < 2 * lengths[:, None])


def render(tokens: Tensor) -> str:
    """Symbols as space-separated indices 0.. (padding and separator dropped)."""
    return " ".join(str(int(t) - FIRST_SYMBOL) for t in tokens if t >= FIRST_SYMBOL)


class CopyTask(AutoregressiveTask):
    """Cross-entropy and token accuracy on the copied half; ``predict`` copies greedily as an RNN.

    Batches are ``{"tokens": (B, T), "length": (B,)}`` from ``lintf.data.CopyData``.
    """

    prediction_metrics = ("exact_match", "token_accuracy")

    def build_metrics(self) -> None:
        self.val_accuracy = MulticlassAccuracy(self.hparams.vocab_size, average="micro")
        self.test_accuracy = MulticlassAccuracy(self.hparams.vocab_size, average="micro")

    def _scored(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Logits (K, V) and targets (K,) of the copied-half positions of ``batch``."""
        tokens, lengths = batch["tokens"], batch["length"]
        logits = self(tokens[:, :-1])  # (B, T-1, V)
        mask = copied_half(lengths, logits.shape[1])  # (B, T-1)
        return logits[mask], tokens[:, 1:][mask]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits, targets = self._scored(batch)
        loss = F.cross_entropy(logits.float(), targets)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: dict[str, Tensor], stage: str, accuracy: MulticlassAccuracy) -> None:
        logits, targets = self._scored(batch)
        accuracy(logits.argmax(-1), targets)
        self.log(f"{stage}/loss", F.cross_entropy(logits.float(), targets), prog_bar=True, sync_dist=True)
        self.log(f"{stage}/accuracy", accuracy, prog_bar=True)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_accuracy)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_accuracy)

    def copy_greedily(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Read ``s SEP`` in one parallel pass (``prefill``), then let the model write the copy with ``step``.

        Returns:
            next tokens (B, 2 * max(L)): column j is token j + 1, the given one in the prompt ``s SEP``
            and the model's greedy choice after it, like ``forward``'s predictions.
        """
        width = int(2 * lengths.max()) + 1  # s_1..s_L SEP and the copy of the longest row
        return complete(self, tokens[:, :width], known=lengths + 1, sampling=Sampling(temperature=0))[:, 1:]

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """One row per sequence: prompt, target copy, greedy copy, exact match, token accuracy."""
        tokens, lengths = batch["tokens"], batch["length"]
        predicted = self.copy_greedily(tokens, lengths)
        mask = copied_half(lengths, predicted.shape[1])
        correct = (predicted == tokens[:, 1 : predicted.shape[1] + 1]) & mask
        rows = []
        for i, length in enumerate(lengths.tolist()):
            hits = int(correct[i].sum())
            rows.append({
                "input": render(tokens[i, :length]),
                "target": render(tokens[i, length + 1 : 2 * length + 1]),
                "prediction": " ".join(str(int(t) - FIRST_SYMBOL) for t in predicted[i, length : 2 * length]),
                "exact_match": hits == length,
                "token_accuracy": hits / length,
            })
        return rows

    def sample_table(self, batch: dict[str, Tensor], n: int) -> tuple[list[str], list[list[Any]]]:
        """A few greedy copies of ``batch`` as (columns, rows) for a logger's table."""
        rows = self.predict_step({key: value[:n] for key, value in batch.items()}, 0)
        columns = ["input", "target", "prediction", "exact_match"]
        return columns, [[row[c] for c in columns] for row in rows]
