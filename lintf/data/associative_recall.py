"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"): key-value pairs, then queries of their keys.

A sequence of ``max_length`` tokens starts with ``n_pairs`` pairs ``k_1 v_1 ... k_P v_P`` (distinct
keys, values drawn with replacement) and continues with a query region of blanks in which
``n_queries`` of the keys, in random order, stand at random even offsets, each followed by its
value. A causal model reads the sequence and, at every queried key, must predict the value that
key was paired with; only those predictions are scored. Queries sit anywhere in the region, so a
value may be asked for long after its pair was seen (``query_gaps: uniform``), or, as in Zoology's
experiments (``power_law``), mostly soon after: the i-th even offset of the region is drawn with
weight i^(a - 1), a = 0.01, without replacement. Unlike Zoology, whose inputs leave the answers
blank, the value follows its query in the sequence as well (``AssociativeRecallTask(answers: hidden)``
blanks it in what the model reads); keys are distinct within a sequence and each is queried at most
once, so an answer never reveals a later one.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import torch
from torch import Tensor

from lintf.data.synthetic_sequences import Draw, SyntheticSequenceData

BLANK = 0
FIRST_KEY = 1
QueryGaps = Literal["uniform", "power_law"]
QUERY_GAPS = ("uniform", "power_law")
POWER_LAW_EXPONENT = 0.01
"""Zoology's ``power_a``: the i-th query slot is drawn with weight i^(a - 1)."""


def query_offsets(slots: int, count: int, gaps: QueryGaps, generator: torch.Generator) -> Tensor:
    """``count`` distinct slots of ``slots`` in increasing order, (count,): uniform, or weighted i^(a - 1)."""
    if gaps == "uniform":
        return torch.randperm(slots, generator=generator)[:count].sort().values
    weights = torch.arange(1, slots + 1, dtype=torch.float64) ** (POWER_LAW_EXPONENT - 1)  # (slots,)
    return torch.multinomial(weights, count, replacement=False, generator=generator).sort().values


def recall_sequence(
    n_keys: int, n_values: int, max_length: int, n_pairs: int, n_queries: int, seed: int,
    query_gaps: QueryGaps = "uniform",
) -> dict[str, Tensor]:
    """One MQAR sequence, fully determined by ``seed``; ``query_gaps`` places the queries (module docstring).

    Token ids: 0 the blank, 1..n_keys the keys, n_keys + 1..n_keys + n_values the values.

    Returns:
        ``{"tokens": (max_length,) int64, "queries": (max_length,) bool}``: queries is True where a token
        is a queried key, whose next token is the value to recall.
    """
    generator = torch.Generator().manual_seed(seed)
    keys = FIRST_KEY + torch.randperm(n_keys, generator=generator)[:n_pairs]  # (P,) distinct
    values = FIRST_KEY + n_keys + torch.randint(n_values, (n_pairs,), generator=generator)  # (P,)
    tokens = torch.full((max_length,), BLANK, dtype=torch.int64)
    tokens[0 : 2 * n_pairs : 2], tokens[1 : 2 * n_pairs : 2] = keys, values
    asked = torch.randperm(n_pairs, generator=generator)[:n_queries]  # which pairs, in the order asked
    slots = (max_length - 2 * n_pairs) // 2  # even offsets of the query region with room for the answer
    offsets = query_offsets(slots, n_queries, query_gaps, generator)  # (Q,)
    positions = 2 * n_pairs + 2 * offsets  # (Q,)
    tokens[positions], tokens[positions + 1] = keys[asked], values[asked]
    queries = torch.zeros(max_length, dtype=torch.bool)
    queries[positions] = True
    return {"tokens": tokens, "queries": queries}


class AssociativeRecallData(SyntheticSequenceData):
    """Seeded synthetic MQAR sequences: ``n_pairs`` key-value pairs, then queries of their keys.

    A model reads ``tokens[:-1]`` and predicts ``tokens[1:]``; only the values that follow queried
    keys are scored. Each split draws its sequences from its own seeds, so no generated sequence is
    shared between training, validation, test and predict.

    Args:
        n_pairs: key-value pairs at the start of each sequence.
        n_queries: keys asked for after the pairs; None asks for every key once.
        max_length: tokens per sequence; the pairs and two tokens per query must fit.
        n_keys: distinct key tokens (at least ``n_pairs``: keys are distinct within a sequence).
        n_values: distinct value tokens.
        batch_size: sequences per batch (per device).
        train_size: training sequences per epoch.
        val_size: validation sequences.
        test_size: test sequences.
        predict_size: sequences answered by ``lintf predict``.
        seed: seed of the data; independent of the model's ``seed_everything``.
        query_gaps: where the queries stand in their region: "uniform" (any even offset alike) or
            "power_law" (Zoology's: mostly soon after the pairs, weight i^(-0.99) for the i-th offset).
        num_workers: DataLoader worker processes (sequences are made on demand; 0 is usually fastest).
    """

    def __init__(
        self,
        n_pairs: int = 8,
        n_queries: int | None = None,
        max_length: int = 64,
        n_keys: int = 64,
        n_values: int = 64,
        batch_size: int = 64,
        train_size: int = 64_000,
        val_size: int = 1024,
        test_size: int = 1024,
        predict_size: int = 256,
        seed: int = 0,
        query_gaps: QueryGaps = "uniform",
        num_workers: int = 0,
    ) -> None:
        n_queries = n_pairs if n_queries is None else n_queries
        check_arguments(n_pairs, n_queries, max_length, n_keys, n_values)
        if query_gaps not in QUERY_GAPS:
            raise ValueError(f"AssociativeRecallData: query_gaps must be one of {', '.join(QUERY_GAPS)}, got "
                             f"{query_gaps!r}")
        super().__init__(batch_size, train_size, val_size, test_size, predict_size, seed, num_workers)
        self.save_hyperparameters()
        self.n_pairs, self.n_queries, self.max_length = n_pairs, n_queries, max_length
        self.n_keys, self.n_values, self.query_gaps = n_keys, n_values, query_gaps

    @property
    def vocab_size(self) -> int:
        """The blank, the keys and the values; linked to the model's ``vocab_size``."""
        return FIRST_KEY + self.n_keys + self.n_values

    def draw(self) -> Draw:
        """``recall_sequence`` with this data's vocabularies, length, pairs, queries and query gaps."""
        return partial(recall_sequence, self.n_keys, self.n_values, self.max_length, self.n_pairs, self.n_queries,
                       query_gaps=self.query_gaps)


def check_arguments(n_pairs: int, n_queries: int, max_length: int, n_keys: int, n_values: int) -> None:
    """Raise ValueError unless the pairs, queries and vocabularies fit together."""
    if n_pairs < 1 or n_values < 1:
        raise ValueError(f"AssociativeRecallData: n_pairs and n_values must be >= 1, got {n_pairs} and {n_values}")
    if n_keys < n_pairs:
        raise ValueError(f"AssociativeRecallData: n_keys ({n_keys}) must be >= n_pairs ({n_pairs}): the keys of a "
                         "sequence are distinct")
    if not 1 <= n_queries <= n_pairs:
        raise ValueError(f"AssociativeRecallData: n_queries must lie in 1..n_pairs = 1..{n_pairs} (each key is asked "
                         f"for at most once), got {n_queries}")
    needed = 2 * n_pairs + 2 * n_queries
    if max_length < needed:
        raise ValueError(f"AssociativeRecallData: max_length={max_length} is too short for {n_pairs} pairs and "
                         f"{n_queries} queries (two tokens each); use max_length >= {needed}, or fewer pairs or "
                         "queries")
