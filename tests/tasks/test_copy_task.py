"""CopyTask: loss on the copied half only, step form = parallel form, greedy copying."""

import pytest
import torch
import torch.nn.functional as F

import lintf
from lintf.data import CopyData
from lintf.models import EncoderConfig
from lintf.registry import ATTENTIONS
from lintf.tasks import CopyTask
from lintf.tasks.copy import copied_half
from tests.tasks.recurrence import assert_steps_match_forward


def tiny_task(attention: str = "linear", **kwargs) -> CopyTask:
    encoder = EncoderConfig(d_model=16, n_layers=2, n_heads=2, attention=attention, dropout=0.0, **kwargs)
    return CopyTask(12, 24, encoder).eval()


def test_copied_half_mask():
    mask = copied_half(torch.tensor([2, 3]), 8)
    assert mask.tolist() == [
        [False, False, True, True, False, False, False, False],
        [False, False, False, True, True, True, False, False],
    ]


def test_loss_ignores_the_prompt():
    torch.manual_seed(0)
    task = tiny_task()
    batch = next(iter(CopyData(max_length=24, batch_size=4).train_dataloader()))
    logits, targets = task._scored(batch)
    assert logits.shape == (int(batch["length"].sum()), 12)
    changed = {**batch, "tokens": batch["tokens"].clone()}
    changed["tokens"][:, -1] = 5  # a padding target outside the copy
    torch.testing.assert_close(task._scored(changed)[0], logits)


def test_loss_is_the_cross_entropy_of_the_copied_symbols():
    torch.manual_seed(0)
    task = tiny_task()
    batch = next(iter(CopyData(max_length=24, batch_size=4).train_dataloader()))
    tokens, lengths = batch["tokens"], batch["length"].tolist()
    logits = task(tokens[:, :-1])
    # the copy of s (length L) is tokens L + 1 .. 2L, predicted at positions L .. 2L - 1
    scored = [(i, p) for i, length in enumerate(lengths) for p in range(length, 2 * length)]
    expected = F.cross_entropy(torch.stack([logits[i, p] for i, p in scored]),
                               torch.stack([tokens[i, p + 1] for i, p in scored]))
    torch.testing.assert_close(task.training_step(batch, 0), expected)


@pytest.mark.parametrize("name", [n for n in lintf.list_attentions() if ATTENTIONS.get(n).step_matches_forward])
def test_step_matches_forward(name):
    torch.manual_seed(0)
    task = tiny_task(name)
    assert_steps_match_forward(task, torch.randint(0, 12, (2, 10)), tolerance=1e-4)


def test_greedy_copy_uses_its_own_outputs():
    torch.manual_seed(0)
    task = tiny_task()
    batch = next(iter(CopyData(max_length=24, batch_size=3, predict_size=3).predict_dataloader()))
    rows = task.predict_step(batch, 0)
    assert len(rows) == 3
    for row, length in zip(rows, batch["length"].tolist()):
        assert len(row["prediction"].split()) == length == len(row["target"].split())
        assert row["exact_match"] == (row["prediction"] == row["target"])
        assert 0.0 <= row["token_accuracy"] <= 1.0


def test_unknown_attention_kwargs_name_the_class():
    with pytest.raises(lintf.registry.UnknownArgumentError, match="n_hashes"):
        tiny_task("reformer", attention_kwargs={"n_hash": 2})


def test_checkpoint_records_the_task():
    checkpoint = {}
    tiny_task().on_save_checkpoint(checkpoint)
    assert checkpoint["lintf_task"] == "lintf.tasks.copy.CopyTask"


def copy_by_steps_only(task: CopyTask, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The greedy copy with every prompt token fed through ``step`` (no prefill): the reference."""
    state = task.init_state(tokens.shape[0])
    predicted, columns = tokens[:, 0], []
    for position in range(int(2 * lengths.max())):
        given = torch.where(position <= lengths, tokens[:, position], predicted)
        logits, state = task.step(given, position, state)
        predicted = logits.argmax(-1)
        columns.append(torch.where(position < lengths, tokens[:, position + 1], predicted))  # given, then own
    return torch.stack(columns, dim=1)


@pytest.mark.parametrize("name", ["linear", "softmax", "retention"])
def test_greedy_copy_with_prefill_equals_stepping_the_prompt(name):
    torch.manual_seed(0)
    task = tiny_task(name).double()
    batch = next(iter(CopyData(max_length=24, batch_size=5, predict_size=5).predict_dataloader()))
    with torch.no_grad():
        assert torch.equal(task.copy_greedily(batch["tokens"], batch["length"]),
                           copy_by_steps_only(task, batch["tokens"], batch["length"]))
