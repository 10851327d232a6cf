"""The steps of causal token tasks scored on some next-token targets only (the copied half, the recalled values)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy


class MaskedNextTokenSteps:
    """Training, validation and test steps: cross-entropy and accuracy of the next tokens ``scored_mask`` selects.

    Mixed in before ``AutoregressiveTask`` (``class CopyTask(MaskedNextTokenSteps, AutoregressiveTask)``),
    so it is no task of its own (``lintf generate`` lists only tasks). The model reads
    ``batch["tokens"][:, :-1]`` and predicts ``tokens[:, 1:]``; the task says in ``scored_mask``
    which of those targets count. Logs ``{train,val,test}/loss`` and ``{val,test}/accuracy``
    (micro-averaged over the scored targets).
    """

    def build_metrics(self) -> None:
        self.val_accuracy = MulticlassAccuracy(self.hparams.vocab_size, average="micro")
        self.test_accuracy = MulticlassAccuracy(self.hparams.vocab_size, average="micro")

    def scored_mask(self, batch: dict[str, Tensor], width: int) -> Tensor:
        """Bool mask (B, width) over the next-token targets ``tokens[:, 1:]``: True where a target is scored."""
        raise NotImplementedError

    def _scored(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Logits (K, V) and targets (K,) at the K scored positions of ``batch``."""
        tokens = batch["tokens"]
        logits = self(tokens[:, :-1])  # (B, T-1, V)
        mask = self.scored_mask(batch, logits.shape[1])  # (B, T-1)
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
