"""What the layer-recipe tests share: the written equations' common parts and the checks against them.

Each test file writes its layer's recurrence position by position in float64 (``reference``); the
short causal convolution and the output tail (RMSNorm per head, the optional SiLU output gate, the
output projection) are the same in every recipe, and so are the checks: the parallel forward and its
gradients against the equations, and the recurrent step and split prefills against the parallel forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn


def causal_conv(u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y_t[c] = sum_j weight[c, 0, K - 1 - j] u_{t - j}[c] (+ bias[c]), zeros before the start: (B, N, C)."""
    kernel = weight.shape[-1]
    out = torch.zeros_like(u)
    for t in range(u.shape[1]):
        for j in range(min(kernel, t + 1)):
            out[:, t] += weight[:, 0, kernel - 1 - j] * u[:, t - j]
    return out if bias is None else out + bias


def output_tail(layer: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """RMSNorm of each head's output (B, N, H, dv), times SiLU(g_proj x) where the layer has it, then o_proj."""
    p = dict(layer.named_parameters())
    normed = out / torch.sqrt(out.square().mean(-1, keepdim=True) + layer.o_norm.eps) * p["o_norm.weight"]
    if "g_proj.weight" in p:
        normed = normed * F.silu((x @ p["g_proj.weight"].T).view(out.shape))
    return normed.flatten(2) @ p["o_proj.weight"].T


def assert_forward_and_gradients_match(layer: nn.Module, reference: Callable, length: int) -> None:
    """The parallel forward of a (2, length) float64 input and every gradient equal ``reference(layer, x)``'s."""
    x = torch.randn(2, length, layer.q_proj.in_features, dtype=torch.float64, requires_grad=True)
    out, _ = layer(x, causal=True)
    expected = reference(layer, x)
    torch.testing.assert_close(out, expected)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), [x, *layer.parameters()])
    expected_grads = torch.autograd.grad((expected * weights).sum(), [x, *layer.parameters()])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def assert_steps_and_splits_continue(layer: nn.Module, length: int, splits: Iterable[int]) -> None:
    """Step by step, and a prefill split at each of ``splits`` then continued, equal the parallel forward."""
    x = torch.randn(2, length, layer.q_proj.in_features, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = layer(x, causal=True)
        state, steps = layer.init_state(2, dtype=torch.float64), []
        for t in range(length):
            y_t, state = layer.step(x[:, t], state)
            steps.append(y_t)
        torch.testing.assert_close(torch.stack(steps, 1), whole)
        for split in splits:
            first, state = layer(x[:, :split], causal=True, return_state=True)
            second, _ = layer(x[:, split:], causal=True, state=state, return_state=True)
            torch.testing.assert_close(torch.cat([first, second], 1), whole)


def in_float64(layer: nn.Module) -> nn.Module:
    """The layer in float64 with output-norm weights and convolution biases drawn in [0.5, 1.5], so a dropped
    term shows (their defaults, ones and zeros, would hide it)."""
    layer = layer.double()
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            if name.endswith(("o_norm.weight", "conv1d.bias")):
                parameter.uniform_(0.5, 1.5)
    return layer


def projected_inputs(layer: nn.Module, x: torch.Tensor, activation: Callable = F.silu) -> dict[str, torch.Tensor]:
    """q, k, v projections of x (B, N, d_model), each through the layer's short convolution and ``activation``
    where it has one: {"q": (B, N, width), ...}."""
    p = dict(layer.named_parameters())
    projected = {name: x @ p[f"{name}_proj.weight"].T for name in "qkv"}
    if "q_conv1d.weight" in p:
        projected = {name: activation(causal_conv(u, p[f"{name}_conv1d.weight"], p.get(f"{name}_conv1d.bias")))
                     for name, u in projected.items()}
    return projected
