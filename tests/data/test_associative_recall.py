"""AssociativeRecallData: layout of MQAR sequences, determinism, disjoint splits, argument checks."""

import pytest
import torch

from lintf.data import AssociativeRecallData
from lintf.data.associative_recall import BLANK, FIRST_KEY, QUERY_GAPS


def pairs_and_queries(tokens: torch.Tensor, queries: torch.Tensor, n_pairs: int) -> tuple[dict, list]:
    """{key: value} of the leading pairs and the (key, answer) pairs asked, read independently of the generator."""
    pairs = dict(zip(tokens[: 2 * n_pairs : 2].tolist(), tokens[1 : 2 * n_pairs : 2].tolist()))
    asked = [(int(tokens[p]), int(tokens[p + 1])) for p in range(len(tokens)) if queries[p]]
    return pairs, asked


@pytest.mark.parametrize("query_gaps", QUERY_GAPS)
@pytest.mark.parametrize("n_pairs, n_queries, max_length", [(4, None, 24), (8, 3, 64), (16, None, 65)])
def test_layout(n_pairs, n_queries, max_length, query_gaps):
    data = AssociativeRecallData(n_pairs=n_pairs, n_queries=n_queries, max_length=max_length, n_keys=20,
                                 n_values=7, train_size=50, query_gaps=query_gaps)
    for item in (data.split("train")[i] for i in range(50)):
        tokens, queries = item["tokens"], item["queries"]
        assert tokens.shape == queries.shape == (max_length,) and queries.dtype == torch.bool
        pairs, asked = pairs_and_queries(tokens, queries, n_pairs)
        assert len(pairs) == n_pairs  # distinct keys
        assert all(FIRST_KEY <= key < FIRST_KEY + 20 for key in pairs)
        assert all(FIRST_KEY + 20 <= value < FIRST_KEY + 27 for value in pairs.values())
        assert len(asked) == (n_pairs if n_queries is None else n_queries)
        assert len({key for key, _ in asked}) == len(asked)  # each key asked for at most once
        assert all(pairs[key] == answer for key, answer in asked)
        positions = queries.nonzero().squeeze(-1)
        assert bool((positions >= 2 * n_pairs).all()) and bool(((positions - 2 * n_pairs) % 2 == 0).all())
        rest = torch.ones(max_length, dtype=torch.bool)
        rest[: 2 * n_pairs] = False
        rest[positions], rest[positions + 1] = False, False
        assert bool((tokens[rest] == BLANK).all())


def test_queries_reach_the_whole_region():
    data = AssociativeRecallData(n_pairs=2, max_length=40, train_size=300)
    positions = torch.cat([data.split("train")[i]["queries"].nonzero().squeeze(-1) for i in range(300)])
    assert int(positions.min()) == 4 and int(positions.max()) == 38


@pytest.mark.parametrize("query_gaps", QUERY_GAPS)
def test_where_a_single_query_stands(query_gaps):
    """One query per sequence: its slot i (0-based) is drawn with weight (i + 1)^(-0.99) (Zoology's power law,
    a = 0.01) or uniformly; the counts of 3000 sequences stay within 4.5 standard deviations of those shares."""
    sequences, slots = 3000, 18  # 2 pairs in 40 tokens: even offsets 0..34 of the region after them
    data = AssociativeRecallData(n_pairs=2, n_queries=1, max_length=40, train_size=sequences, query_gaps=query_gaps)
    offsets = [(int(data.split("train")[i]["queries"].nonzero()) - 4) // 2 for i in range(sequences)]
    weights = [1.0] * slots if query_gaps == "uniform" else [(i + 1) ** -0.99 for i in range(slots)]
    for slot in range(slots):
        share = weights[slot] / sum(weights)
        spread = 4.5 * (sequences * share * (1 - share)) ** 0.5
        assert abs(offsets.count(slot) - sequences * share) <= spread, (slot, offsets.count(slot), sequences * share)


def test_vocabulary():
    data = AssociativeRecallData(n_keys=30, n_values=10)
    assert data.vocab_size == 41


def test_seeded_and_splits_disjoint():
    a, b = AssociativeRecallData(seed=3), AssociativeRecallData(seed=3)
    assert torch.equal(a.split("train")[5]["tokens"], b.split("train")[5]["tokens"])
    seen = {split: {tuple(a.split(split)[i]["tokens"].tolist()) for i in range(200)}
            for split in ("train", "val", "test", "predict")}
    for split, sequences in seen.items():
        for other, others in seen.items():
            if split != other:
                assert not sequences & others, (split, other)
    assert not torch.equal(a.split("train")[0]["tokens"], AssociativeRecallData(seed=4).split("train")[0]["tokens"])


def test_loader_batches():
    batch = next(iter(AssociativeRecallData(n_pairs=4, max_length=32, batch_size=4).train_dataloader()))
    assert batch["tokens"].shape == batch["queries"].shape == (4, 32)
    assert batch["queries"].sum(1).tolist() == [4, 4, 4, 4]


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"n_pairs": 8, "max_length": 31}, r"max_length=31 is too short for 8 pairs and 8 queries .* >= 32"),
        ({"n_pairs": 8, "n_queries": 9}, r"n_queries must lie in 1..n_pairs = 1..8 .*got 9"),
        ({"n_pairs": 8, "n_queries": 0}, "n_queries must lie in"),
        ({"n_pairs": 8, "n_keys": 7}, r"n_keys \(7\) must be >= n_pairs \(8\)"),
        ({"n_pairs": 0}, "n_pairs and n_values must be >= 1"),
        ({"n_values": 0}, "n_pairs and n_values must be >= 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"predict_size": 0}, "predict_size must be >= 1"),
        ({"query_gaps": "zipf"}, "query_gaps must be one of uniform, power_law, got 'zipf'"),
    ],
)
def test_bad_arguments(kwargs, text):
    with pytest.raises(ValueError, match=text):
        AssociativeRecallData(**kwargs)
