"""Output heads: normalised distributions, a naive reference, and samples from the trained distribution."""

from __future__ import annotations

import math

import pytest
import torch

import lintf


def head_names() -> list[str]:
    return lintf.list_heads()


@pytest.mark.parametrize("name", head_names())
def test_probabilities_over_all_values_sum_to_one(name):
    head = lintf.build_head(name, 12)
    params = head(3 * torch.randn(5, 7, 12))
    probabilities = head.log_probs(params).exp()
    assert probabilities.shape == (5, 7, 256)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(5, 7), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", head_names())
def test_nll_is_minus_log_probs_at_the_targets(name):
    head = lintf.build_head(name, 12)
    params = head(torch.randn(3, 4, 12))
    targets = torch.randint(0, 256, (3, 4))
    expected = -head.log_probs(params).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(head.nll(params, targets), expected)


@pytest.mark.parametrize("name", head_names())
def test_samples_follow_the_model_probabilities(name):
    """Histogram of 200k draws from one fixed head output vs the probabilities the loss uses."""
    head = lintf.build_head(name, 12)
    params = head(2 * torch.randn(1, 12)).detach()
    draws, per_call = 200_000, 4_000  # bounded batches: log_probs builds (batch, 256, P) tensors
    generator = torch.Generator().manual_seed(0)
    samples = torch.cat([head.sample(params.expand(per_call, -1), generator=generator) for _ in range(draws // per_call)])
    histogram = torch.bincount(samples, minlength=256).double() / draws
    probabilities = head.log_probs(params)[0].exp().double()
    total_variation = 0.5 * (histogram - probabilities).abs().sum()
    assert total_variation < 0.02, total_variation
    assert samples.min() >= 0 and samples.max() <= 255


def test_uniform_categorical_head_gives_eight_bits_per_dim():
    head = lintf.build_head("categorical", 4)
    torch.nn.init.zeros_(head.logits.weight), torch.nn.init.zeros_(head.logits.bias)
    targets = torch.randint(0, 256, (6, 10))
    nll = head.nll(head(torch.randn(6, 10, 4)), targets)
    torch.testing.assert_close(nll / math.log(2), torch.full((6, 10), 8.0))


def naive_mixture_probabilities(logits, means, log_scales):
    """p(v) from explicit logistic CDF differences, float64, edges extended to +-inf."""
    values = torch.arange(256, dtype=torch.float64)
    x = 2 * values / 255 - 1
    upper = torch.where(values == 255, torch.tensor(float("inf"), dtype=torch.float64), x + 1 / 255)
    lower = torch.where(values == 0, torch.tensor(float("-inf"), dtype=torch.float64), x - 1 / 255)
    scales = log_scales.exp()[:, None]

    def cdf(t):
        return torch.sigmoid((t[None, :] - means[:, None]) / scales)

    mass = cdf(upper) - cdf(lower)  # (K, 256)
    return (torch.softmax(logits, -1)[:, None] * mass).sum(0)


def test_logistic_mixture_matches_naive_cdf_differences():
    head = lintf.build_head("logistic_mixture", 4, n_components=3)
    logits = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    means = torch.tensor([-0.5, 0.1, 0.9], dtype=torch.float64)
    log_scales = torch.tensor([-2.0, -3.0, -1.5], dtype=torch.float64)
    params = torch.cat([logits, means, log_scales]).float()
    got = head.log_probs(params).exp().double()
    torch.testing.assert_close(got, naive_mixture_probabilities(logits, means, log_scales), atol=1e-6, rtol=1e-4)


def test_logistic_mixture_rejects_bad_components():
    with pytest.raises(ValueError, match="n_components must be >= 1"):
        lintf.build_head("logistic_mixture", 4, n_components=0)
    with pytest.raises(KeyError, match="unknown output head 'mixture'.*categorical, logistic_mixture"):
        lintf.build_head("mixture", 4)
