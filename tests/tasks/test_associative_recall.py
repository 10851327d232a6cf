"""AssociativeRecallTask: loss and accuracy on the queried values only, predictions, step form = parallel form."""

import pytest
import torch
import torch.nn.functional as F

from lintf.data import AssociativeRecallData
from lintf.models import EncoderConfig
from lintf.tasks import AssociativeRecallTask
from tests.tasks.recurrence import assert_steps_match_forward

N_PAIRS, LENGTH = 3, 20


def tiny_task(attention: str = "linear", layer: str = "projections", answers: str = "shown") -> AssociativeRecallTask:
    encoder = EncoderConfig(d_model=16, n_layers=2, n_heads=2, attention=attention, dropout=0.0, layer=layer)
    return AssociativeRecallTask(AssociativeRecallData(n_keys=8, n_values=8).vocab_size, LENGTH, encoder,
                                 answers=answers).eval()


def batch(size: int = 4) -> dict[str, torch.Tensor]:
    data = AssociativeRecallData(n_pairs=N_PAIRS, max_length=LENGTH, n_keys=8, n_values=8, batch_size=size)
    return next(iter(data.val_dataloader()))


def asked_positions(tokens: torch.Tensor) -> list[tuple[int, int]]:
    """(row, position) of every key token after the pairs: the queries, found from the layout alone."""
    return [(i, p) for i in range(tokens.shape[0]) for p in range(2 * N_PAIRS, tokens.shape[1])
            if 1 <= int(tokens[i, p]) <= 8]


def test_loss_is_the_cross_entropy_of_the_queried_values():
    torch.manual_seed(0)
    task, data = tiny_task(), batch()
    tokens = data["tokens"]
    logits = task(tokens[:, :-1])
    asked = asked_positions(tokens)
    expected = F.cross_entropy(torch.stack([logits[i, p] for i, p in asked]),
                               torch.stack([tokens[i, p + 1] for i, p in asked]))
    assert len(asked) == 4 * N_PAIRS
    torch.testing.assert_close(task.training_step(data, 0), expected)


def test_predict_rows_answer_every_query():
    torch.manual_seed(0)
    task, data = tiny_task(), batch(3)
    tokens = data["tokens"]
    rows = task.predict_step(data, 0)
    answers = task(tokens[:, :-1]).argmax(-1)
    for i, row in enumerate(rows):
        asked = [p for row_index, p in asked_positions(tokens) if row_index == i]
        assert row["pairs"].split() == [f"{int(tokens[i, 2 * j])}:{int(tokens[i, 2 * j + 1])}" for j in range(N_PAIRS)]
        assert row["queries"].split() == [str(int(tokens[i, p])) for p in asked]
        assert row["target"].split() == [str(int(tokens[i, p + 1])) for p in asked]
        assert row["prediction"].split() == [str(int(answers[i, p])) for p in asked]
        hits = sum(int(answers[i, p]) == int(tokens[i, p + 1]) for p in asked)
        assert row["accuracy"] == pytest.approx(hits / len(asked))
        assert row["exact_match"] == (hits == len(asked))


def test_a_model_that_knows_the_answers_scores_one():
    task, data = tiny_task(), batch(3)
    tokens = data["tokens"]
    task.forward = lambda inputs: F.one_hot(tokens[:, 1 : inputs.shape[1] + 1], task.hparams.vocab_size).float()
    assert all(row["accuracy"] == 1.0 and row["exact_match"] for row in task.predict_step(data, 0))
    task.validation_step(data, 0)
    assert float(task.val_accuracy.compute()) == 1.0


@pytest.mark.parametrize("name", ["linear", "delta_net", "gated_delta_net", "gla"])
def test_step_matches_forward(name):
    torch.manual_seed(0)
    assert_steps_match_forward(tiny_task(name), batch(2)["tokens"][:, :12], tolerance=1e-4)


def test_step_matches_forward_with_the_softmax_layer_recipe():
    torch.manual_seed(0)
    assert_steps_match_forward(tiny_task("softmax", "recipe"), batch(2)["tokens"][:, :12], tolerance=1e-4)


def test_hidden_answers_are_blanked_in_what_the_model_reads():
    torch.manual_seed(0)
    task, data = tiny_task(answers="hidden"), batch()
    tokens = data["tokens"]
    read = []
    forward = task.forward
    task.forward = lambda inputs: read.append(inputs) or forward(inputs)
    loss = task.training_step(data, 0)
    blanked = tokens[:, :-1].clone()
    asked = asked_positions(tokens)
    for i, p in asked:
        if p + 1 < blanked.shape[1]:
            blanked[i, p + 1] = 0
    torch.testing.assert_close(read[0], blanked)
    logits = forward(blanked)
    expected = F.cross_entropy(torch.stack([logits[i, p] for i, p in asked]),
                               torch.stack([tokens[i, p + 1] for i, p in asked]))
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("answers, accuracy", [("shown", 1.0), ("hidden", 0.0)])
def test_a_model_that_reads_ahead_scores_only_where_the_answers_are_shown(answers, accuracy):
    task, data = tiny_task(answers=answers), batch(3)
    vocab = task.hparams.vocab_size
    task.forward = lambda inputs: F.one_hot(inputs.roll(-1, dims=1), vocab).float()  # the next token it reads
    data["queries"][:, -2] = False  # a query at the last position has no answer to read ahead to
    task.validation_step(data, 0)
    assert float(task.val_accuracy.compute()) == accuracy


def test_an_unknown_answer_layout_is_refused():
    with pytest.raises(ValueError, match="answers must be one of shown, hidden"):
        tiny_task(answers="blank")
