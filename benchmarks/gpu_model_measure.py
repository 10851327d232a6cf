"""Measured fwd+bwd times of the ops ``benchmarks.gpu_model`` models: its ``--measure`` column."""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.gpu_model import Shape


def measured_seconds(op: str, s: Shape, device: str, repeats: int = 10) -> float:
    """Median seconds of one fwd+bwd of the op as a user calls it (value checks included), after 3 warm-ups.

    bf16 on CUDA, fp32 elsewhere; q, k positive (feature-mapped; L2-normalised for the delta rules), decays,
    gates and the delta rules' beta in (0, 1).
    """
    import torch
    import torch.nn.functional as F

    from lintf.ops import causal_linear_attention, decayed_dot_product, delta_rule, gated_linear_attention

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.rand(1, s.heads, s.n, d, generator=gen, device=device).to(dtype).requires_grad_()
               for d in (s.c, s.c, s.m))
    grad = torch.randn(1, s.heads, s.n, s.m, generator=gen, device=device).to(dtype)
    log_decay = -0.1 * torch.rand(1, s.heads, s.n, generator=gen, device=device)
    log_gate = -0.1 * torch.rand(1, s.heads, s.n, s.c, generator=gen, device=device)
    beta = torch.rand(1, s.heads, s.n, generator=gen, device=device)
    qn, kn = (F.normalize(x.detach().float(), dim=-1).to(dtype).requires_grad_() for x in (q, k))
    calls = {"causal": lambda: causal_linear_attention(q, k, v),
             "decayed": lambda: decayed_dot_product(q, k, v, log_decay),
             "gla": lambda: gated_linear_attention(q, k, v, log_gate),
             "delta": lambda: delta_rule(qn, kn, v, beta),
             "gated_delta": lambda: delta_rule(qn, kn, v, beta, log_decay=log_decay)}
    times = []
    for step in range(3 + repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        calls[op]().backward(grad)
        if device == "cuda":
            torch.cuda.synchronize()
        if step >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def device_name(parser: argparse.ArgumentParser, device: str | None) -> str | None:
    """The name of the device --measure times on (torch's for a GPU), or None without --measure."""
    if device is None:
        return None
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--measure cuda: no CUDA device is visible to torch here; the model itself needs none")
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"
