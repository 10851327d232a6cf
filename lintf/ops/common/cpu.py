"""What the compiled library's CPU runtime, shared by every CPU op, reports: its vector path and its output cache.

Both live in ``csrc/common/cpu/``: the vector path (AVX-512, AVX2+FMA or portable) every CPU call
runs, chosen per call from the CPU's features and ``LINTF_CPU_PATH``; and the cache of the CPU ops'
large outputs (``output_cache.h``). Each function loads the library; without it, the answers say so.
"""

from __future__ import annotations

import torch

from lintf.ops.extension import load_library

OUTPUT_CACHE_FIELDS = ("cached_bytes", "in_use_bytes", "reused", "allocated", "limit_bytes", "peak_bytes", "evicted")


def cpu_vector_path() -> str | None:
    """The vector path CPU calls of the compiled ops run now ("avx512", "avx2", "portable"), None without them.

    The widest the CPU supports unless ``LINTF_CPU_PATH`` forces one; read on every call, like the ops do.
    Raises ValueError when ``LINTF_CPU_PATH`` names a path this CPU cannot run.
    """
    return str(torch.ops.lintf.cpu_vector_path()) if load_library() else None


def cpu_vector_paths() -> list[str]:
    """The vector paths this CPU can run, widest first; empty without the compiled ops."""
    return list(torch.ops.lintf.cpu_vector_paths()) if load_library() else []


def cpu_output_cache_stats() -> dict[str, int] | None:
    """The CPU output cache's counters, None without the compiled ops.

    Outputs of the CPU ops from 4 MB on reuse the buffers of freed outputs (``csrc/common/cpu/output_cache.h``).
    By default the cache holds, free and in use together, at most the most bytes of live outputs the
    process has had at once plus one largest buffer: a loop at one shape reuses every buffer from its
    second step on, and outputs of ever new sizes (mixed sequence lengths) evict the oldest free buffers
    instead of accumulating. ``LINTF_CPU_OUTPUT_CACHE_MB`` replaces that bound with a fixed cap on the
    free bytes (0 turns the cache off).

    Returns:
        ``cached_bytes``: free buffers kept for reuse; ``in_use_bytes``: buffers held by live tensors;
        ``reused`` / ``allocated`` / ``evicted``: buffers taken from the cache / allocated afresh /
        unmapped to stay within the bound; ``peak_bytes``: the most bytes in use at once (since start
        or the last ``empty_cpu_output_cache``); ``limit_bytes``: the cap when
        ``LINTF_CPU_OUTPUT_CACHE_MB`` is set, else the default bound, ``peak_bytes`` plus the largest buffer.
    """
    if not load_library():
        return None
    return dict(zip(OUTPUT_CACHE_FIELDS, (int(x) for x in torch.ops.lintf.cpu_output_cache_stats())))


def empty_cpu_output_cache() -> None:
    """Unmap the CPU output cache's free buffers, returning their memory to the system (resident memory drops).

    Like ``torch.cuda.empty_cache``: buffers held by live tensors stay. The default bound restarts from
    the bytes in use now, so a run whose outputs shrank (after a larger evaluation, say) keeps less.
    """
    if load_library():
        torch.ops.lintf.empty_cpu_output_cache()
