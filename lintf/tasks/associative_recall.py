"""Multi-query associative recall (MQAR, Arora et al. 2023): recall the value paired with each queried key."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from lintf.data.associative_recall import BLANK
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.masked_next_token import MaskedNextTokenSteps


class AssociativeRecallTask(MaskedNextTokenSteps, AutoregressiveTask):
    """Cross-entropy and accuracy on the recalled values only; ``predict`` answers every query.

    Batches are ``{"tokens": (B, T), "queries": (B, T) bool}`` from ``lintf.data.AssociativeRecallData``;
    the prediction at a queried key is scored against the value that follows it. The answer of a
    query depends only on the tokens before it, so one causal pass (equal to stepping the recurrent
    form token by token) answers every query of a sequence.
    """

    prediction_metrics = ("accuracy", "exact_match")

    def scored_mask(self, batch: dict[str, Tensor], width: int) -> Tensor:
        """The queried keys, whose next token is the value to recall."""
        return batch["queries"][:, :width]

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """One row per sequence: its pairs, the keys asked, their values, the answers, accuracy and exact match.

        Tokens print as their ids (0 the blank, then the keys, then the values).
        """
        tokens, queries = batch["tokens"], batch["queries"][:, :-1]
        answers = self(tokens[:, :-1]).argmax(-1)  # (B, T-1): the predicted next token everywhere
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

