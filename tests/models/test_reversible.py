"""Reversible layers: the inverse, gradients equal to plain autograd of the same net, memory flat in depth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import lintf
from lintf.models.attention_layer import MultiHeadAttention
from lintf.models.reversible import ReversibleBlock, reversible_sequence


class Branches(nn.Module):
    """A pre-norm transformer layer's two branches: f = attention, g = feed-forward, each with dropout."""

    def __init__(self, d_model: int, attention: str, dropout: float) -> None:
        super().__init__()
        self.attention_norm, self.feed_forward_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, 2, lintf.build_attention(attention, head_dim=d_model // 2))
        self.feed_forward = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Dropout(dropout),
                                          nn.Linear(4 * d_model, d_model))
        self.dropout = nn.Dropout(dropout)

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.attention(self.attention_norm(x), causal=True)[0])

    def g(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.feed_forward(self.feed_forward_norm(x)))

    def block(self) -> ReversibleBlock:
        return ReversibleBlock(self.f, self.g, tuple(self.parameters()))


def stack(n_layers: int, attention: str = "linear", dropout: float = 0.0, d_model: int = 16) -> nn.ModuleList:
    return nn.ModuleList(Branches(d_model, attention, dropout) for _ in range(n_layers))


def plain(layers: nn.ModuleList, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same reversible net run by plain autograd: every activation stored."""
    for layer in layers:
        x1, x2 = layer.block()(x1, x2)
    return x1, x2


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).detach().norm() / want.detach().norm())


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def test_the_inverse_gives_back_the_inputs():
    layer = stack(1)[0].double()
    x1, x2 = torch.randn(2, 2, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer.block().inverse(*layer.block()(x1, x2)), (x1, x2), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("attention", ["linear", "softmax", "routing"])
def test_gradients_equal_plain_autograd_of_the_same_net(attention):
    """fp64, training mode with dropout (the recomputation replays the random state), 4 layers."""
    layers = stack(4, attention, dropout=0.2).double().train()
    start = {key: value.clone() for key, value in layers.state_dict().items()}  # routing moves its centroids
    x = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 2, 9, 16, dtype=torch.float64)
    results = []
    for run in (plain, lambda stack_, a, b: reversible_sequence([layer.block() for layer in stack_], a, b)):
        layers.load_state_dict(start)
        torch.manual_seed(7)
        outputs = torch.stack(run(layers, x, x))
        inputs = (x, *layers.parameters())
        results.append((outputs, torch.autograd.grad(outputs, inputs, upstream), layers.state_dict()))
    (want, want_grads, want_state), (got, got_grads, got_state) = results
    assert relative_error(got, want) < 1e-12
    assert relative_error(flat(got_grads), flat(want_grads)) < 1e-8
    scale = flat(want_grads).norm()  # softmax's key bias has a gradient of rounding noise only: judged on this scale
    for got_grad, want_grad in zip(got_grads, want_grads):
        assert (got_grad - want_grad).norm() < 1e-8 * max(want_grad.norm(), 1e-3 * scale)
    for key in want_state:  # buffers moved exactly once, as by the plain forward
        torch.testing.assert_close(got_state[key], want_state[key], atol=1e-12, rtol=1e-12)


def test_the_stored_graph_holds_only_the_last_pair():
    layers = stack(3, dropout=0.1).train()
    x = torch.randn(2, 9, 16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        reversible_sequence([layer.block() for layer in layers], x, x)
    assert len(saved) == 2 and all(t.shape == x.shape for t in saved)


def test_without_gradients_it_is_the_plain_loop():
    layers = stack(3).eval()
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(reversible_sequence([layer.block() for layer in layers], x, x), plain(layers, x, x))


def test_the_recomputation_runs_under_the_forward_autocast():
    layers = stack(2, "softmax").train()
    x = torch.randn(2, 9, 16, requires_grad=True)
    grads = []
    for run in (plain, lambda stack_, a, b: reversible_sequence([layer.block() for layer in stack_], a, b)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = torch.stack(run(layers, x, x))
        grads.append(torch.autograd.grad(outputs.float().square().sum(), (x, *layers.parameters())))
    got, want = grads[1], grads[0]
    assert relative_error(flat(got), flat(want)) < 2e-2  # bf16 branches; the reconstructed inputs differ by rounding


MEMORY = """
import json, re, torch
from tests.models.test_reversible import plain, stack
from lintf.models.reversible import reversible_sequence
torch.set_num_threads(1)

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

def peak_extra_mb(n_layers, reversible):
    layers = stack(n_layers, d_model=64).train()
    x = torch.randn(1, 4096, 64, requires_grad=True)
    base = resident_mb()
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    if reversible:
        y1, y2 = reversible_sequence([layer.block() for layer in layers], x, x)
    else:
        y1, y2 = plain(layers, x, x)
    (y1 + y2).square().mean().backward()
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) / 1024 - base

peak_extra_mb(2, True)  # first calls: allocator and kernels warm
print(json.dumps({f"{kind}{n}": peak_extra_mb(n, kind == "reversible") for kind in ("reversible", "plain")
                  for n in (2, 12)}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads resident memory from /proc")
def test_training_memory_stays_flat_in_depth_at_4096_positions():
    """12 layers within 1.3x of 2 layers' peak training memory reversibly, against >= 4x with stored activations."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "LINTF_EXTENSION": "off"}
    done = subprocess.run([sys.executable, "-c", MEMORY], env=env, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    assert peaks["reversible12"] <= 1.3 * peaks["reversible2"], peaks
    assert peaks["plain12"] >= 4 * peaks["plain2"], peaks
