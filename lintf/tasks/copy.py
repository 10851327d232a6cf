"""The copy task (paper 4.1.1): a causal transformer learns to repeat ``s`` after ``s SEP``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lintf.data.copy import FIRST_SYMBOL
from lintf.sampling import Sampling, complete
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.masked_next_token import MaskedNextTokenSteps


def copied_half(lengths: Tensor, width: int) -> Tensor:
    """Bool mask (B, width) over next-token targets: True where the target is a copied symbol.

    Target j is token j + 1; the copy of ``s`` (length L) occupies tokens L + 1 .. 2L.
    """
    j = torch.arange(width, device=lengths.device)
    return (j >= lengths[:, None]) & (j < 2 * lengths[:, None])


def render(tokens: Tensor) -> str:
    """Symbols as space-separated indices 0.. (padding and separator dropped)."""
    return " ".join(str(int(t) - FIRST_SYMBOL) for t in tokens if t >= FIRST_SYMBOL)


class CopyTask(MaskedNextTokenSteps, AutoregressiveTask):
    """Cross-entropy and token accuracy on the copied half; ``predict`` copies greedily as an RNN.

    Batches are ``{"tokens": (B, T), "length": (B,)}`` from ``lintf.data.CopyData``.
    """

    prediction_metrics = ("exact_match", "token_accuracy")

    def scored_mask(self, batch: dict[str, Tensor], width: int) -> Tensor:
        """The copied half of each sequence (``copied_half``)."""
        return copied_half(batch["length"], width)

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
