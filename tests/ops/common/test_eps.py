"""eps of the normalised ops: a finite number >= 0, refused otherwise with a ValueError naming the value.

A NaN or negative eps used to pass: NaN poisoned every output, a negative eps could make a
denominator zero. The check is plain Python on a Python float, so it must not break a
``torch.compile(fullgraph=True)`` graph, also after eps becomes a symbolic float (a recompile for a
second value).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from lintf.ops import causal_linear_attention
from lintf.ops.decayed.product import decayed_linear_attention
from lintf.ops.decayed.reference import bidirectional_decay_matrix, decay_matrix
from lintf.ops.causal.reference import causal_linear_attention_reference
from lintf.ops.causal.sequence_parallel import sequence_parallel_causal_linear_attention

BAD = [float("nan"), -1e-6, -1.0, float("inf"), float("-inf")]


def inputs(seed: int = 0, n: int = 37) -> tuple[torch.Tensor, ...]:
    """q, k (non-negative), v, log_decay in [-1, 0], fp64."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.rand(2, 3, n, 5, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, n, 4, generator=generator, dtype=torch.float64)
    log_decay = -torch.rand(2, 3, n, generator=generator, dtype=torch.float64)
    return q, k, v, log_decay


def message(owner: str, eps: object) -> str:
    return re.escape(f"{owner}: eps must be a finite number >= 0, got {eps}")


def decayed_reference(q, k, v, log_decay, eps: float, causal: bool) -> torch.Tensor:
    """sum_j w_ij (q_i.k_j) v_j / (sum_j w_ij (q_i.k_j) + eps), from the explicit N x N decay weights."""
    decay = decay_matrix(log_decay) if causal else bidirectional_decay_matrix(log_decay)
    weights = decay * (q @ k.transpose(-1, -2))
    return (weights @ v) / (weights.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("eps", BAD)
def test_causal_linear_attention_refuses_eps(op_path, eps):
    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match=message("causal linear attention", eps)):
        causal_linear_attention(q, k, v, eps)


@pytest.mark.parametrize("eps", [*BAD, "1e-6", None, True, torch.tensor(1e-6)], ids=str)
@pytest.mark.parametrize("causal", [True, False])
def test_decayed_linear_attention_refuses_eps(eps, causal):
    q, k, v, log_decay = inputs()
    shown = eps if isinstance(eps, float) else repr(eps)
    with pytest.raises(ValueError, match=message("decayed linear attention", shown)):
        decayed_linear_attention(q, k, v, log_decay, causal=causal, eps=eps)


@pytest.mark.parametrize("eps", ["1e-6", None, True])
def test_causal_linear_attention_refuses_a_non_number(op_path, eps):
    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match=message("causal linear attention", repr(eps))):
        causal_linear_attention(q, k, v, eps)


def test_sequence_parallel_refuses_eps_before_communicating():
    """Checked before the process group is needed: the error names eps, not the missing group."""
    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match=message("sequence-parallel causal linear attention", float("nan"))):
        sequence_parallel_causal_linear_attention(q, k, v, float("nan"))


@pytest.mark.parametrize("eps", [0, 0.0, 3, np.float32(0.5), 1e300])
def test_finite_non_negative_eps_is_used(op_path, eps):
    q, k, v, log_decay = inputs(1)
    want = causal_linear_attention_reference(q, k, v, float(eps))
    torch.testing.assert_close(causal_linear_attention(q, k, v, eps), want)
    for causal in (True, False):
        got = decayed_linear_attention(q, k, v, log_decay, causal=causal, eps=eps)
        torch.testing.assert_close(got, decayed_reference(q, k, v, log_decay, float(eps), causal))


def test_compiled_fullgraph_takes_every_valid_eps_and_refuses_bad_ones(op_path):
    """The second and third values recompile with eps as a symbolic float; bad ones still fail, naming eps."""
    torch._dynamo.reset()
    q, k, v, _ = (t.float() for t in inputs(2))
    compiled = torch.compile(causal_linear_attention, fullgraph=True)
    for eps in (1e-6, 0.5, 2.0):
        want = causal_linear_attention_reference(q.double(), k.double(), v.double(), eps).float()
        torch.testing.assert_close(compiled(q, k, v, eps), want, rtol=1e-4, atol=1e-5)
    for eps in (float("nan"), -1.0, float("inf")):
        with pytest.raises(Exception, match=message("causal linear attention", eps)):  # dynamo wraps the ValueError
            compiled(q, k, v, eps)
