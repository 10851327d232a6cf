"""Multi-query associative recall (MQAR, Arora et al. 2023): recall the value paired with each queried key."""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor

from lintf.data.associative_recall import BLANK
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import PositionKind
from lintf.names import HeadName
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.masked_next_token import MaskedNextTokenSteps

AnswerLayout = Literal["shown", "hidden"]
ANSWER_LAYOUTS = ("shown", "hidden")


class AssociativeRecallTask(MaskedNextTokenSteps, AutoregressiveTask):
    """Cross-entropy and accuracy on the recalled values only; ``predict`` answers every query.

    Batches are ``{"tokens": (B, T), "queries": (B, T) bool}`` from ``lintf.data.AssociativeRecallData``;
    the prediction at a queried key is scored against the value that follows it. The answer of a
    query depends only on the tokens before it, so one causal pass (equal to stepping the recurrent
    form token by token) answers every query of a sequence.

    With ``answers: shown`` the model reads the sequences as they are, the value after each query
    included, so a model that picks a value of the sequence not yet asked for scores about half at 4
    pairs; ``hidden`` (Zoology's layout) blanks those values in what the model reads, so a value can
    only be recalled from its pair.

    Args:
        vocab_size: number of token ids; linked from the data module.
        max_length: tokens per sequence; linked from the data module.
        encoder, positions, row_bytes, optimizer, lr_scheduler, head, head_kwargs, init_from: as
            ``AutoregressiveTask``.
        answers: "shown" (the values after the queries stand in the input) or "hidden" (blanked).
    """

    prediction_metrics = ("accuracy", "exact_match")

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        encoder: EncoderConfig = EncoderConfig(),
        positions: PositionKind = "learned",
        row_bytes: int | None = None,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        head: HeadName = HeadName("categorical"),
        head_kwargs: dict[str, Any] | None = None,
        init_from: str | None = None,
        answers: AnswerLayout = "shown",
    ) -> None:
        if answers not in ANSWER_LAYOUTS:
            raise ValueError(f"AssociativeRecallTask: answers must be one of {', '.join(ANSWER_LAYOUTS)}, got "
                             f"{answers!r}")
        super().__init__(vocab_size, max_length, encoder, positions, row_bytes, optimizer, lr_scheduler, head,
                         head_kwargs, init_from)
        self.answers = answers

    def inputs(self, batch: dict[str, Tensor]) -> Tensor:
        """What the model reads, (B, T-1): ``tokens[:, :-1]``, with each queried value blanked if answers are hidden."""
        tokens = batch["tokens"][:, :-1]
        if self.answers == "shown":
            return tokens
        answered = batch["queries"][:, :-1].roll(1, dims=1)  # (B, T-1): the position after each queried key
        answered[:, 0] = False
        return tokens.masked_fill(answered, BLANK)

    def _scored(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Logits (K, V) and targets (K,) at the K queried keys of ``batch``, the model reading ``inputs``."""
        logits = self(self.inputs(batch))  # (B, T-1, V)
        mask = self.scored_mask(batch, logits.shape[1])  # (B, T-1)
        return logits[mask], batch["tokens"][:, 1:][mask]

    def scored_mask(self, batch: dict[str, Tensor], width: int) -> Tensor:
        """The queried keys, whose next token is the value to recall."""
        return batch["queries"][:, :width]

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """One row per sequence: its pairs, the keys asked, their values, the answers, accuracy and exact match.

        Tokens print as their ids (0 the blank, then the keys, then the values).
        """
        tokens, queries = batch["tokens"], batch["queries"][:, :-1]
        answers = self(self.inputs(batch)).argmax(-1)  # (B, T-1): the predicted next token everywhere
        rows = []
        for i in range(tokens.shape[0]):
            asked = queries[i].nonzero().squeeze(-1)  # (Q,) positions of the queried keys
            before = tokens[i, : int(asked[0])]  # the pairs, then the blanks before the first query
            pairs = before[before != BLANK].view(-1, 2).tolist()
            hits = answers[i, asked] == tokens[i, asked + 1]
            rows.append({
                "pairs": " ".join(f"{key}:{value}" for key, value in pairs),
                "queries": " ".join(map(str, tokens[i, asked].tolist())),
                "target": " ".join(map(str, tokens[i, asked + 1].tolist())),
                "prediction": " ".join(map(str, answers[i, asked].tolist())),
                "accuracy": float(hits.float().mean()),
                "exact_match": bool(hits.all()),
            })
        return rows

    def sample_table(self, batch: dict[str, Tensor], n: int) -> tuple[list[str], list[list[Any]]]:
        """A few answered sequences of ``batch`` as (columns, rows) for a logger's table."""
        rows = self.predict_step({key: value[:n] for key, value in batch.items()}, 0)
        columns = ["pairs", "queries", "target", "prediction", "accuracy"]
        return columns, [[row[c] for c in columns] for row in rows]

