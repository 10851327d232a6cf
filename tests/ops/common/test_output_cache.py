"""The CPU op's output cache: freed outputs' buffers are reused, never while a tensor holds them.

Outputs from 4 MB on come from the cache (csrc/common/cpu/output_cache.h). A reused buffer holds the last
owner's values, so every test that reuses one first fills it with NaN and checks the new result
against the naive reference: a stale value anywhere would show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from lintf.ops import causal_linear_attention, cpu_output_cache_stats, empty_cpu_output_cache
from lintf.ops.causal.reference import causal_linear_attention_reference

pytestmark = pytest.mark.usefixtures("compiled_op")

SHAPE = (1, 2, 8192, 64)  # one output: 4 MiB in fp32, the smallest size the cache takes


def inputs(seed: int, requires_grad: bool = False) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.rand(SHAPE, generator=generator) for _ in range(2))
    v = torch.randn(SHAPE, generator=generator)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return causal_linear_attention_reference(q.double(), k.double(), v.double()).float()


def assert_matches_reference(out: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    assert torch.isfinite(out).all(), "stale NaN from a reused buffer"
    torch.testing.assert_close(out, reference(*tensors), rtol=1e-4, atol=1e-4)


def test_freed_output_buffer_is_reused_and_fully_overwritten() -> None:
    first = causal_linear_attention(*inputs(0))
    pointer = first.data_ptr()
    first.fill_(float("nan"))
    before = cpu_output_cache_stats()
    del first
    tensors = inputs(1)
    second = causal_linear_attention(*tensors)
    after = cpu_output_cache_stats()
    assert second.data_ptr() == pointer, "the freed output's buffer was not reused"
    assert after["reused"] == before["reused"] + 1
    assert_matches_reference(second, tensors)


def test_live_output_is_never_handed_out_again() -> None:
    first_inputs, second_inputs = inputs(2), inputs(3)
    first = causal_linear_attention(*first_inputs)
    kept = first.clone()
    second = causal_linear_attention(*second_inputs)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, kept), "a live output was overwritten"
    assert_matches_reference(second, second_inputs)


def test_gradients_from_reused_buffers_match_the_reference() -> None:
    for seed in (4, 5):  # the second backward reuses the first one's freed gradient buffers
        tensors = inputs(seed, requires_grad=True)
        upstream = torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed))
        grads = torch.autograd.grad(causal_linear_attention(*tensors), tensors, upstream)
        for grad in grads:
            assert torch.isfinite(grad).all()
        doubles = [t.detach().double().requires_grad_() for t in tensors]
        want = torch.autograd.grad(causal_linear_attention_reference(*doubles), doubles, upstream.double())
        for got, expected in zip(grads, want):
            torch.testing.assert_close(got, expected.float(), rtol=1e-3, atol=1e-3)
        for grad in grads:
            grad.fill_(float("nan"))
        del grads


def test_cached_output_can_be_resized() -> None:
    out = causal_linear_attention(*inputs(6))
    out.resize_(2, *SHAPE[1:])  # larger: the storage reallocates through the cache's allocator
    out.fill_(1.0)
    assert out.shape == (2, *SHAPE[1:]) and bool((out == 1).all())


def test_empty_cache_returns_free_buffers() -> None:
    out = causal_linear_attention(*inputs(7))
    del out
    assert cpu_output_cache_stats()["cached_bytes"] > 0
    empty_cpu_output_cache()
    assert cpu_output_cache_stats()["cached_bytes"] == 0


def run_with_limit(limit: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LINTF_CPU_OUTPUT_CACHE_MB": limit}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


PROGRAM = """
import json
import torch
from lintf.ops import causal_linear_attention, cpu_output_cache_stats
q = torch.rand(1, 2, 8192, 64)
outs = [causal_linear_attention(q, q, q) for _ in range(3)]
del outs
print(json.dumps(cpu_output_cache_stats()))
"""


@pytest.mark.parametrize(("limit", "cached"), [("0", 0), ("5", 4 << 20), ("64", 12 << 20)])
def test_limit_bounds_the_cached_bytes(limit: str, cached: int) -> None:
    result = run_with_limit(limit, PROGRAM)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["limit_bytes"] == int(limit) << 20
    assert stats["cached_bytes"] == cached
    if limit == "0":
        assert stats["allocated"] == 0, "with the cache off, outputs come from ATen's allocator"


@pytest.mark.parametrize("limit", ["lots", "-1", "2048MB", str(1 << 40)])
def test_bad_limit_is_a_clear_error(limit: str) -> None:
    result = run_with_limit(limit, PROGRAM)
    assert result.returncode != 0
    assert "LINTF_CPU_OUTPUT_CACHE_MB must be a whole number of MB >= 0 and below 2^40" in result.stderr
    assert f"got '{limit}'" in result.stderr
