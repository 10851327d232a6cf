"""delta_net, gated_delta_net and gla against naive recurrences written from their definitions (fp64).

The references run one position at a time from the formulas of the class docstrings, with gates
computed here from the module's parameters; outputs and the gradients of every input and parameter
must agree. Padded positions are skipped by the references (they write nothing, decay nothing).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lintf

B, H, D, M = 2, 3, 8, 5
TIGHT = {"atol": 1e-10, "rtol": 1e-10}


def build(name: str, **kwargs):
    return lintf.build_attention(name, head_dim=D, **kwargs).double()


def inputs(n: int, s: int | None = None, grad: bool = True):
    s = n if s is None else s
    q, k, v = torch.randn(B, H, n, D), torch.randn(B, H, s, D), torch.randn(B, H, s, M)
    return tuple(t.double().requires_grad_(grad) for t in (q, k, v))


def padding_mask(n: int) -> torch.Tensor:
    padding = torch.zeros(B, n, dtype=torch.bool)
    padding[0, :2] = True
    padding[1, n // 2 : n // 2 + 3] = True
    return padding


def delta_gates(attention, k):
    """beta (B, H, S) and alpha (B, H, S) of the docstrings: sigmoid(w . k + b), exp(-exp(a) softplus(w' . k + b'))."""
    p = attention.beta_projection
    beta = torch.sigmoid(torch.einsum("bhsd,d->bhs", k, p.weight[0]) + p.bias[0])
    beta = 2 * beta if attention.negative_eigenvalues else beta
    if not hasattr(attention, "decay_projection"):
        return beta, torch.ones_like(beta)
    g = attention.decay_projection
    time_step = F.softplus(torch.einsum("bhsd,d->bhs", k, g.weight[0]) + g.bias[0])
    alpha = torch.exp(-attention.log_rate[0].exp() * time_step)
    return beta, alpha


def naive_delta(attention, q, k, v, causal: bool, padding=None):
    """S = alpha S; S = S + beta k (v - S^T k)^T; out = scale S^T q (causal), or every query reading the last S."""
    beta, alpha = delta_gates(attention, k)
    q_hat, k_hat = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    state = q.new_zeros(B, H, D, M)
    outputs = []
    for t in range(k.shape[2]):
        kt, vt, bt = k_hat[:, :, t], v[:, :, t], beta[:, :, t, None]  # (B, H, D), (B, H, M), (B, H, 1)
        decayed = alpha[:, :, t, None, None] * state
        stored = torch.einsum("bhdm,bhd->bhm", decayed, kt)
        written = decayed + kt[..., None] * (bt * (vt - stored))[..., None, :]
        if padding is None:
            state = written
        else:  # a padded position leaves its sequence's state as it was
            state = torch.where(padding[:, t, None, None, None], state, written)
        if causal:
            outputs.append(attention.scale * torch.einsum("bhdm,bhd->bhm", state, q_hat[:, :, t]))
    if causal:
        return torch.stack(outputs, dim=2)
    return attention.scale * torch.einsum("bhdm,bhnd->bhnm", state, q_hat)


def gla_log_gates(attention, k):
    """logsigmoid(W_up W_down k + b) / temperature: (B, H, N, D)."""
    logits = k @ attention.gate_down.weight.T @ attention.gate_up.weight.T + attention.gate_up.bias
    return F.logsigmoid(logits) / attention.temperature


def naive_gla(attention, q, k, v, causal: bool, padding=None):
    """Causal: S = diag(g) S + k v^T, out = scale S^T q. Non-causal: the pairwise form with gates between i and j."""
    log_gate = gla_log_gates(attention, k)
    if padding is not None:
        log_gate = log_gate.masked_fill(padding[:, None, :, None], 0.0)
        k = k.masked_fill(padding[:, None, :, None], 0.0)
    n = q.shape[2]
    if causal:
        state, outputs = q.new_zeros(B, H, D, M), []
        for t in range(n):
            state = log_gate[:, :, t, :, None].exp() * state + k[:, :, t, :, None] * v[:, :, t, None, :]
            outputs.append(attention.scale * torch.einsum("bhdm,bhd->bhm", state, q[:, :, t]))
        return torch.stack(outputs, dim=2)
    out = torch.zeros(B, H, n, M, dtype=q.dtype)
    for i in range(n):
        for j in range(n):
            low, high = min(i, j), max(i, j)
            gate = log_gate[:, :, low + 1 : high + 1].sum(2).exp()  # (B, H, D): positions after the earlier one
            weight = attention.scale * (q[:, :, i] * gate * k[:, :, j]).sum(-1, keepdim=True)  # (B, H, 1)
            out[:, :, i] += weight * v[:, :, j]
    return out


REFERENCES = {"delta_net": naive_delta, "gated_delta_net": naive_delta, "gla": naive_gla}


def assert_matches_reference(attention, reference, q, k, v, causal: bool, padding=None):
    params = [p for p in attention.parameters()]
    got = attention(q, k, v, causal=causal, key_padding_mask=padding)
    want = reference(attention, q, k, v, causal, padding)
    torch.testing.assert_close(got, want, **TIGHT)
    upstream = torch.randn_like(got)
    tensors = [q, k, v, *params]
    got_grads = torch.autograd.grad(got, tensors, upstream)
    want_grads = torch.autograd.grad(want, tensors, upstream)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, **TIGHT)


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 7, 70])
def test_matches_the_naive_recurrence(name, causal, n):
    attention = build(name)
    with torch.no_grad():  # parameters away from their initial values, so every term matters
        for p in attention.parameters():
            p.add_(0.3 * torch.randn_like(p))
    assert_matches_reference(attention, REFERENCES[name], *inputs(n), causal)


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize("causal", [True, False])
def test_padded_keys_are_skipped(name, causal):
    attention = build(name)
    assert_matches_reference(attention, REFERENCES[name], *inputs(12), causal, padding_mask(12))


def test_negative_eigenvalues_double_beta():
    attention = build("delta_net", negative_eigenvalues=True)
    assert_matches_reference(attention, naive_delta, *inputs(9), True)


@pytest.mark.parametrize("name", ["delta_net", "gated_delta_net"])
def test_cross_attention_reads_the_memory_of_the_keys(name):
    attention = build(name)
    assert_matches_reference(attention, naive_delta, *inputs(4, s=9), False)


def test_a_key_written_twice_keeps_the_later_value():
    """beta = 1: the delta rule replaces the value stored under a key; linear attention would add both."""
    attention = build("delta_net")
    with torch.no_grad():
        attention.beta_projection.weight.zero_()
        attention.beta_projection.bias.fill_(50.0)  # sigmoid(50) = 1 in fp64 up to 2e-22
    key = F.normalize(torch.randn(1, 1, 1, D, dtype=torch.float64), dim=-1)
    k = key.expand(1, 1, 2, D)
    v = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0], [-5.0, 0.5, 0.0, 2.0, 1.0]]]], dtype=torch.float64)
    out = attention(k, k, v, causal=True)
    torch.testing.assert_close(out[0, 0, 1], attention.scale * v[0, 0, 1], atol=1e-12, rtol=1e-12)


def test_gate_ranges():
    k = 5 * torch.randn(B, H, 40, D, dtype=torch.float64)
    beta = build("delta_net").beta(k)
    assert bool(((beta > 0) & (beta < 1)).all())
    doubled = build("delta_net", negative_eigenvalues=True).beta(k)
    assert bool(((doubled > 0) & (doubled < 2)).all()) and bool((doubled > 1).any())
    log_decay = build("gated_delta_net").log_decay(k)
    assert bool((log_decay <= 0).all()) and bool((log_decay < 0).any())
    assert build("delta_net").log_decay(k) is None
    log_gate = build("gla").log_gate(k)
    assert log_gate.shape == (B, H, 40, D) and bool((log_gate <= 0).all())


def test_gates_start_near_one():
    """At initialisation gated_delta_net keeps ~0.99 of its memory per step, and GLA's gates sit near 1."""
    k = torch.randn(B, H, 40, D, dtype=torch.float64)
    decay = build("gated_delta_net").log_decay(k).detach().exp()
    assert 0.95 < float(decay.median()) < 0.999
    gates = build("gla").log_gate(k).detach().exp()
    assert float(gates.min()) > math.exp(math.log(1e-3) / 16) and float(gates.median()) > 0.95


@pytest.mark.parametrize("kwargs, message", [
    ({"gate_rank": 0}, "gate_rank must be a positive int, got 0"),
    ({"temperature": 0.0}, "temperature must be > 0, got 0.0"),
])
def test_gla_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lintf.build_attention("gla", head_dim=D, **kwargs)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_state_of_the_wrong_value_size_names_the_field(name):
    attention = build(name)
    q, k, v = inputs(6, grad=False)
    state = attention.init_state(B, H, M + 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"state\.kv must be a torch\.float64 tensor of shape \(2, 3, 8, 5\)"):
        attention(q, k, v, causal=True, state=state)
