"""How much memory the CPU op's output cache holds, measured in fresh processes.

By default the cache keeps, free and in use together, at most the process's own peak of live outputs
plus one largest buffer (csrc/common/cpu/output_cache.h): a loop at one shape reuses every buffer, mixed
sequence lengths do not pile up buffers, and emptying the cache gives its pages back to the system.
Resident memory is read from /proc (Linux).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.usefixtures("compiled_op"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads resident memory from /proc"),
]

PRELUDE = """
import json, os, random, resource
import torch
from lintf.ops import causal_linear_attention, cpu_output_cache_stats, empty_cpu_output_cache
torch.set_num_threads(1)
PAGE = os.sysconf("SC_PAGE_SIZE")

def rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20

def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def step(n, heads=4, features=64):
    q, k = (torch.rand(1, heads, n, features, requires_grad=True) for _ in range(2))
    v = torch.randn(1, heads, n, features, requires_grad=True)
    causal_linear_attention(q, k, v).backward(torch.ones(1, heads, n, features))
"""


def run(code: str, cache_mb: str | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "LINTF_CPU_OUTPUT_CACHE_MB"}
    if cache_mb is not None:
        env["LINTF_CPU_OUTPUT_CACHE_MB"] = cache_mb
    result = subprocess.run([sys.executable, "-c", PRELUDE + code], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


MIXED_LENGTHS = """
random.seed(0)
step(4096)  # imports, threads and the op's first call, before the baseline
baseline = rss_mb()
for n in random.sample(range(4096, 32769, 512), 40):  # outputs of 8 to 32 MB, every size new
    step(n)
print(json.dumps({"growth_mb": peak_rss_mb() - baseline, "stats": cpu_output_cache_stats()}))
"""


def test_mixed_sequence_lengths_do_not_pile_up_buffers():
    """Every step has new sizes: the cache evicts instead of keeping up to a fixed 1 GB (it held 2x the memory)."""
    on, off = run(MIXED_LENGTHS), run(MIXED_LENGTHS, cache_mb="0")
    # the largest step holds 8 tensors of 32 MB (inputs, gradients) and 4 outputs of the op: 384 MB
    assert off["growth_mb"] > 200, off
    assert on["growth_mb"] <= 1.3 * off["growth_mb"], (on, off)
    assert on["stats"]["evicted"] > 0 and off["stats"]["allocated"] == 0
    assert on["stats"]["cached_bytes"] + on["stats"]["in_use_bytes"] <= on["stats"]["limit_bytes"]


def test_a_loop_at_one_shape_reuses_every_buffer_after_its_first_step():
    stats = run("""
counts = []
for _ in range(4):
    step(8192)
    counts.append(cpu_output_cache_stats()["allocated"])
print(json.dumps({"counts": counts, **cpu_output_cache_stats()}))
""")
    first = stats["counts"][0]
    assert first >= 4, stats  # forward output, dq, dk, dv
    assert stats["counts"] == [first] * 4 and stats["evicted"] == 0, stats
    assert stats["reused"] >= 3 * first, stats


def test_outputs_of_two_sizes_never_alive_together_are_both_reused():
    """A size alternation whose buffers exceed the peak of live outputs still reuses both (one buffer of slack)."""
    stats = run("""
q = torch.rand(1, 4, 16384, 64)
for _ in range(4):
    causal_linear_attention(q, q, q)            # 16 MB output, freed at once
    causal_linear_attention(q[:, :, :12288], q[:, :, :12288], q[:, :, :12288])  # 12 MB
print(json.dumps(cpu_output_cache_stats()))
""")
    assert stats["allocated"] == 2 and stats["reused"] == 6 and stats["evicted"] == 0, stats


def test_empty_cache_returns_the_memory_to_the_system():
    """Also buffers below glibc's raised mmap threshold, which free() kept in the heap."""
    stats = run("""
torch.empty(24 << 20, dtype=torch.uint8)  # freeing a 24 MB mapping raises glibc's mmap threshold to 24 MB
q = torch.rand(1, 2, 16384, 64)  # 8 MB outputs
outs = [causal_linear_attention(q, q, q) for _ in range(24)]
for out in outs:
    out.fill_(1.0)
del outs, out
cached = cpu_output_cache_stats()["cached_bytes"]
before = rss_mb()
empty_cpu_output_cache()
print(json.dumps({"cached_mb": cached / 2**20, "dropped_mb": before - rss_mb(), **cpu_output_cache_stats()}))
""", cache_mb="1024")
    assert stats["cached_mb"] == 24 * 8, stats
    assert stats["dropped_mb"] >= 0.9 * stats["cached_mb"], stats
    assert stats["cached_bytes"] == 0
