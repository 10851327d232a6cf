"""CopyData: layout of the sequences, determinism, links and argument checks."""

import pickle

import pytest
import torch

from lintf.data import CopyData
from lintf.data.copy import FIRST_SYMBOL, PAD, SEP


def test_layout_and_lengths():
    data = CopyData(n_symbols=10, max_length=128, train_size=200)
    for item in (data.split("train")[i] for i in range(200)):
        tokens, length = item["tokens"], int(item["length"])
        assert tokens.shape == (128,) and 1 <= length <= 63
        assert tokens[length] == SEP
        assert torch.equal(tokens[:length], tokens[length + 1 : 2 * length + 1])
        assert bool((tokens[:length] >= FIRST_SYMBOL).all()) and bool((tokens[:length] < FIRST_SYMBOL + 10).all())
        assert bool((tokens[2 * length + 1 :] == PAD).all())


def test_defaults_match_the_paper():
    data = CopyData()
    assert (data.n_symbols, data.max_length, data.vocab_size) == (10, 128, 12)


def test_seeded_and_splits_differ():
    a, b = CopyData(seed=3), CopyData(seed=3)
    assert torch.equal(a.split("train")[5]["tokens"], b.split("train")[5]["tokens"])
    train = torch.stack([a.split("train")[i]["tokens"] for i in range(8)])
    val = torch.stack([a.split("val")[i]["tokens"] for i in range(8)])
    assert not torch.equal(train, val)
    assert not torch.equal(a.split("train")[0]["tokens"], CopyData(seed=4).split("train")[0]["tokens"])


def test_loader_batches():
    batch = next(iter(CopyData(max_length=32, batch_size=4).train_dataloader()))
    assert batch["tokens"].shape == (4, 32) and batch["length"].shape == (4,)


def test_a_split_survives_pickling_for_worker_processes():
    split = CopyData(max_length=32, seed=2).split("val")
    copied = pickle.loads(pickle.dumps(split))
    assert len(copied) == len(split)
    for i in (0, 7):
        assert torch.equal(copied[i]["tokens"], split[i]["tokens"])
        assert torch.equal(copied[i]["length"], split[i]["length"])
    with pytest.raises(IndexError, match="out of range"):
        split[len(split)]


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"max_length": 2}, "max_copy_length"),
        ({"max_copy_length": 100}, "max_length=128"),
        ({"n_symbols": 0}, "n_symbols"),
        ({"batch_size": 0}, "batch_size"),
        ({"test_size": 0}, "CopyData: test_size must be >= 1, got 0"),
        ({"predict_size": 0}, "CopyData: predict_size must be >= 1, got 0"),
    ],
)
def test_bad_arguments(kwargs, text):
    with pytest.raises(ValueError, match=text):
        CopyData(**kwargs)
