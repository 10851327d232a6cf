"""Token choice (greedy, temperature, top-k, top-p) against plain references, and the prefill-then-step loop
against feeding every token through ``step``."""

import math

import pytest
import torch

from lintf.generation import Sampling, complete
from lintf.generation.stepping import CompiledStep
from lintf.heads import CategoricalHead, LogisticMixtureHead
from lintf.models import EncoderConfig
from lintf.tasks import AutoregressiveTask

DRAWS = 40_000


def frequencies(sampling: Sampling, head, params: torch.Tensor) -> torch.Tensor:
    """Share of each token among DRAWS choices for one row of params (1, P)."""
    generator = torch.Generator().manual_seed(0)
    draws = sampling.choose(head, params.expand(DRAWS, -1), generator)
    return torch.bincount(draws, minlength=head.n_values).double() / DRAWS


def reference_probabilities(logits: list[float], temperature: float, top_k: int | None, top_p: float) -> list[float]:
    """Temperature, then top-k, then the nucleus, written out with Python lists."""
    scaled = [x / temperature for x in logits]
    peak = max(scaled)
    weights = [math.exp(x - peak) for x in scaled]
    ranked = sorted(range(len(logits)), key=lambda i: -scaled[i])
    kept = set(ranked[:top_k] if top_k else ranked)
    total, mass, nucleus = sum(weights[i] for i in kept), 0.0, set()
    for i in ranked:
        if i in kept and mass < top_p:
            nucleus.add(i)
            mass += weights[i] / total
    norm = sum(weights[i] for i in nucleus)
    return [weights[i] / norm if i in nucleus else 0.0 for i in range(len(logits))]


@pytest.mark.parametrize("options", [(1.0, None, 1.0), (0.5, None, 1.0), (2.0, None, 1.0), (1.0, 3, 1.0),
                                     (1.0, None, 0.6), (0.7, 4, 0.8)])
def test_draws_follow_the_adjusted_distribution(options):
    head = CategoricalHead(4, n_values=6)
    logits = torch.tensor([[2.0, 1.5, 0.3, -0.2, -1.0, 0.9]])
    expected = torch.tensor(reference_probabilities(logits[0].tolist(), *options), dtype=torch.float64)
    observed = frequencies(Sampling(*options), head, logits)
    torch.testing.assert_close(observed, expected, atol=0.012, rtol=0)
    assert torch.all(observed[expected == 0] == 0)  # never outside top-k / the nucleus


def test_greedy_picks_the_most_likely_value_of_any_head():
    torch.manual_seed(1)
    head = LogisticMixtureHead(4, n_components=3).requires_grad_(False)
    params = head(torch.randn(5, 4))
    expected = torch.tensor([max(range(256), key=lambda v: float(head.log_prob(row, torch.tensor(v)))) for row in params])
    assert torch.equal(Sampling(temperature=0).choose(head, params), expected)
    assert torch.equal(Sampling(top_k=1).choose(head, params, torch.Generator().manual_seed(3)), expected)


def test_the_model_s_own_distribution_uses_the_head_s_sampler():
    head = LogisticMixtureHead(4, n_components=2).requires_grad_(False)
    params = head(torch.randn(3, 4))
    drawn = Sampling().choose(head, params, torch.Generator().manual_seed(5))
    assert torch.equal(drawn, head.sample(params, generator=torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("options, message", [
    ({"temperature": -0.5}, "temperature must be a finite number >= 0"),
    ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
    ({"temperature": float("inf")}, "temperature must be a finite number >= 0"),
    ({"top_p": 0.0}, r"top_p must lie in \(0, 1\]"), ({"top_p": 1.5}, r"top_p must lie in \(0, 1\]"),
    ({"top_k": 0}, "top_k must be a whole number >= 1"),
])
def test_bad_options_name_the_value_and_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**options)


def tiny_task(attention: str = "linear") -> AutoregressiveTask:
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=16, n_layers=2, n_heads=2, attention=attention, dropout=0.0)
    return AutoregressiveTask(11, 32, encoder).double().eval()


def by_steps_only(task, tokens, known: int, sampling: Sampling, generator) -> torch.Tensor:
    """The reference: every token, given or chosen, fed through ``step`` from an empty state."""
    out, state = tokens.clone(), task.init_state(tokens.shape[0])
    for position in range(tokens.shape[1] - 1):
        params, state = task.step(out[:, position], position, state)
        if position + 1 >= known:
            out[:, position + 1] = sampling.choose(task.head, params, generator)
    return out


@pytest.mark.parametrize("attention", ["linear", "softmax", "gated_linear"])
@pytest.mark.parametrize("sampling", [Sampling(temperature=0), Sampling(), Sampling(0.8, 5, 0.9)])
def test_prefill_then_step_equals_stepping_every_token(attention, sampling):
    task = tiny_task(attention)
    tokens = torch.randint(0, 11, (3, 20))
    with torch.no_grad():
        completed = complete(task, tokens, 6, sampling, torch.Generator().manual_seed(2))
        expected = by_steps_only(task, tokens, 6, sampling, torch.Generator().manual_seed(2))
    assert torch.equal(completed, expected)
    assert torch.equal(completed[:, :6], tokens[:, :6])


def test_same_seed_same_output_and_each_token_reported_as_it_comes():
    task, tokens = tiny_task(), torch.randint(0, 11, (2, 16))
    seen = []
    first = complete(task, tokens, 4, generator=torch.Generator().manual_seed(7),
                     on_token=lambda position, chosen: seen.append((position, chosen.clone())))
    assert torch.equal(first, complete(task, tokens, 4, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(first, complete(task, tokens, 4, generator=torch.Generator().manual_seed(8)))
    assert [position for position, _ in seen] == list(range(4, 16))
    assert torch.equal(torch.stack([chosen for _, chosen in seen], dim=1), first[:, 4:])


def test_rows_given_more_tokens_keep_them_while_others_generate():
    task, tokens = tiny_task(), torch.randint(0, 11, (2, 12))
    completed = complete(task, tokens, torch.tensor([3, 8]), Sampling(temperature=0))
    assert torch.equal(completed[1, :8], tokens[1, :8]) and torch.equal(completed[0, :3], tokens[0, :3])
    alone = complete(task, tokens[1:], 8, Sampling(temperature=0))
    assert torch.equal(completed[1:], alone)  # the row's own continuation, whatever the other row does


def test_known_must_leave_the_first_token_given():
    task, tokens = tiny_task(), torch.randint(0, 11, (2, 5))
    with pytest.raises(ValueError, match=r"known must lie in 1\.\.5"):
        complete(task, tokens, 0)
    assert torch.equal(complete(task, tokens, 5), tokens)


@pytest.mark.slow
def test_compiled_step_generates_what_the_eager_step_does():
    task = tiny_task().float()
    tokens = torch.randint(0, 11, (2, 24))
    step = CompiledStep(task)
    eager = complete(task, tokens, 5, Sampling(temperature=0))
    compiled = complete(task, tokens, 5, Sampling(temperature=0), step=step)
    assert step.compiled is not None
    assert torch.equal(compiled, eager)
