"""How the compiled CPU ops tune themselves to the CPU they run on: its caches, its vector units, their choices.

The kernels (``csrc/common/cpu/tuning.h``) choose, at every call, from the cache sizes the CPU reports
(cpuid leaf 0x8000001D on AMD, leaf 4 on Intel, else sysconf, else ``/sys/devices/system/cpu``) and
the call's shape:

* the kept-state span: positions between the states the causal and decayed forwards keep for their
  backward, the largest 32 * 2^k up to 1024 whose rows the backward reads twice take at most half of L2,
  but at least the span whose rows weigh 8 times the kept state (each span loads and transposes one);
  rows of half-precision inputs count as fp32, like the states (``span_itemsize``);
* the prefetch distance: chunks of 32 positions a sweep prefetches ahead, the most up to 4 whose rows
  take at most half of L2, at least 1;
* streaming stores for gradients of at least 4 x L2 bytes, and for the delta rule's kept copies when a
  head's take at least half of L2.

The register tiles follow the vector path (``cpu_vector_path``). ``LINTF_CPU_CACHE_KB=l1d,l2,l3`` (KiB)
pretends another CPU's caches, read at every call like ``LINTF_CPU_PATH``. ``cpu_tuning()`` reports it
all; ``python -m lintf.ops.common`` prints it.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from lintf.ops.common.cpu import cpu_vector_path, cpu_vector_paths
from lintf.ops.extension import load_library

TUNING_FIELDS = ("l1d_bytes", "l2_bytes", "l3_bytes", "l3_shared_by", "causal_span", "causal_forward_prefetch",
                 "causal_backward_prefetch", "decayed_span", "decayed_prefetch", "streamed_gradient_bytes",
                 "streamed_kept_bytes")
"""The values of ``torch.ops.lintf.cpu_tuning(features, values, itemsize)``, in its order."""

CHUNK = 32  # positions per chunk of every sweep (csrc/common/cpu/layout.h)
MAX_SPAN, MAX_PREFETCH = 1024, 4  # csrc/common/cpu/tuning.h


def span_itemsize(itemsize: int) -> int:
    """The bytes per element the kept-state span counts: the accumulation dtype's (fp32 for bf16 and fp16).

    Counting bf16 rows at their own 2 bytes doubles the span, which halves the kept states' share of the inputs
    and lets ``LINTF_CPU_BACKWARD=auto`` keep them at C = M = 64; there the backward from states kept every 512
    positions measured no faster than recomputing (bf16, N = 16384, one thread: 100.6 against 99.7 ms).
    """
    return max(itemsize, 4)
# Register tiles per vector path (csrc/<op>/cpu/<op>_<path>.cpp, csrc/common/cpu/recurrence.h): vector bytes,
# state rows of the recurrence's tile (2 vectors wide), rows of tile::gemm's register block (2 vectors wide).
REGISTER_TILES = {"avx512": (64, 8, 8), "avx2": (32, 4, 6), "portable": (16, 4, 4)}


def tuning_values(features: int, values: int, itemsize: int) -> dict[str, int] | None:
    """The caches and the kernels' choices for inputs of (C, M) = (features, values) of itemsize bytes (2, 4, 8).

    None without the compiled ops. Raises ValueError when ``LINTF_CPU_CACHE_KB`` is malformed.
    """
    if not load_library():
        return None
    return dict(zip(TUNING_FIELDS, (int(x) for x in torch.ops.lintf.cpu_tuning(features, values, itemsize))))


@torch.compiler.assume_constant_result
def kept_state_span(op: str, features: int, values: int, itemsize: int) -> int:
    """Positions between the states a CPU forward of ``op`` ("causal" or "decayed") keeps for its backward.

    The largest 32 * 2^k positions, up to 1024, whose rows the backward reads twice take at most half of the
    L2 the CPU reports, but at least the span whose rows weigh 8 times the kept state (256 at C = M = 64 and at
    128, fp32, with 1 MiB of L2); 256 without the compiled ops.
    """
    if op not in ("causal", "decayed"):
        raise ValueError(f"op={op!r}: kept-state spans are chosen for 'causal' or 'decayed'")
    chosen = tuning_values(features, values, span_itemsize(itemsize))
    return 256 if chosen is None else chosen[f"{op}_span"]


def cpu_model() -> str:
    """The CPU's model name as the OS reports it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _kib(n: int) -> str:
    return f"{n / 1024:g} KiB" if n < 1 << 20 else f"{n / (1 << 20):g} MiB"


def kernel_choices(chosen: dict[str, int], features: int, values: int, itemsize: int) -> dict[str, dict]:
    """Each kernel's choices at one shape, each as {"value": ..., "why": ...}, from ``tuning_values``."""
    half_l2, counted = chosen["l2_bytes"] // 2, span_itemsize(itemsize)
    causal_rows, decayed_rows = (2 * features + 3 * values) * counted, (2 * features + 2 * values) * counted + 4
    forward_rows = (2 * features + values) * itemsize

    state = features * values * counted

    def span(value: int, rows: int, what: str) -> dict:
        return {"value": value, "why": f"largest 32 * 2^k <= {MAX_SPAN} positions whose {what} ({rows} B per "
                f"position: {_kib(value * rows)}) fit half of L2 ({_kib(half_l2)}), but whose rows weigh at "
                f"least 8 times the kept state ({_kib(state)})"}

    def ahead(value: int, rows: int) -> dict:
        return {"value": value, "why": f"most chunks up to {MAX_PREFETCH} whose rows ({_kib(CHUNK * rows)} per chunk) "
                f"fit half of L2 ({_kib(half_l2)}), at least 1"}

    streamed = {"value": chosen["streamed_gradient_bytes"], "why": "4 x L2: gradients this large leave the caches "
                "before they are read, so they bypass them"}
    fixed_chunk = {"value": CHUNK, "why": "fixed: the unit of every sweep's register-tiled recurrence"}
    return {
        "causal_product": {"chunk_positions": fixed_chunk,
                           "kept_state_span": span(chosen["causal_span"], causal_rows, "q, k, v, output, gradient"),
                           "forward_prefetch_chunks": ahead(chosen["causal_forward_prefetch"], forward_rows),
                           "backward_prefetch_chunks": ahead(chosen["causal_backward_prefetch"],
                                                             (2 * features + 3 * values) * itemsize),
                           "streamed_gradient_bytes": streamed},
        "decayed_product": {"chunk_positions": fixed_chunk,
                            "kept_state_span": span(chosen["decayed_span"], decayed_rows, "q, k, v, log_decay, "
                                                    "gradient"),
                            "prefetch_chunks": ahead(chosen["decayed_prefetch"],
                                                     (2 * features + 2 * values) * itemsize + 4),
                            "streamed_gradient_bytes": streamed},
        "delta_rule": {"chunk_positions": fixed_chunk,
                       "streamed_kept_bytes": {"value": chosen["streamed_kept_bytes"], "why": "half of L2: a head's "
                                               "kept copies from this size on bypass the caches; smaller ones stay "
                                               "there for the reverse sweep"}},
        "gla": {"chunk_positions": fixed_chunk},
    }


def cpu_tuning(features: int = 64, values: int = 64, dtype: torch.dtype = torch.float32) -> dict | None:
    """What the compiled CPU ops chose on this CPU for inputs of (C, M) = (features, values) in dtype.

    Returns:
        None without the compiled ops, else {"cpu": model name, "caches": {"l1d_bytes", "l2_bytes", "l3_bytes",
        "l3_shared_by", "source"}, "vector_path": the path calls run now, "vector_paths": those this CPU runs,
        "register_tile": the path's vector bytes and tile rows, "shape": the arguments, "kernels": per op,
        each choice as {"value", "why"} (``kernel_choices``)}.

    Raises:
        ValueError: ``LINTF_CPU_CACHE_KB`` or ``LINTF_CPU_PATH`` is malformed.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    chosen = tuning_values(features, values, itemsize)
    if chosen is None:
        return None
    spans = tuning_values(features, values, span_itemsize(itemsize))
    chosen.update(causal_span=spans["causal_span"], decayed_span=spans["decayed_span"])
    path = cpu_vector_path()
    vector_bytes, state_rows, gemm_rows = REGISTER_TILES[path]
    caches = {key: chosen[key] for key in TUNING_FIELDS[:4]}
    return {
        "cpu": cpu_model(),
        "caches": {**caches, "source": str(torch.ops.lintf.cpu_cache_source())},
        "vector_path": path,
        "vector_paths": cpu_vector_paths(),
        "register_tile": {"vector_bytes": vector_bytes, "recurrence_state_rows": state_rows, "gemm_rows": gemm_rows,
                          "why": "the vector path's registers: 2 vectors wide"},
        "shape": {"features": features, "values": values, "dtype": str(dtype).removeprefix("torch.")},
        "kernels": kernel_choices(chosen, features, values, itemsize),
    }


def tuning_lines(report: dict) -> list[str]:
    """``cpu_tuning``'s report as Markdown bullet lines (for the benchmarks' results headers and the CLI)."""
    caches, tile, shape = report["caches"], report["register_tile"], report["shape"]
    cpu = (f"- CPU: {report['cpu']}; caches ({caches['source']}): L1d {_kib(caches['l1d_bytes'])}, "
           f"L2 {_kib(caches['l2_bytes'])} per core, L3 {_kib(caches['l3_bytes'])} shared by "
           f"{caches['l3_shared_by']} logical CPUs")
    vector = (f"- vector path: {report['vector_path']} (this CPU runs: {', '.join(report['vector_paths'])}); "
              f"register tiles of {tile['vector_bytes']}-byte vectors: recurrence {tile['recurrence_state_rows']} "
              f"x 2, gemm {tile['gemm_rows']} x 2")
    tuned = (f"- tuning at C={shape['features']}, M={shape['values']}, {shape['dtype']} "
             "(csrc/common/cpu/tuning.h, docs/cpu_op.md \"Tuning by the CPU's caches\"):")
    lines = [cpu, vector, tuned]
    for op, choices in report["kernels"].items():
        described = "; ".join(f"{name} {choice['value']} ({choice['why']})" for name, choice in choices.items()
                              if name != "chunk_positions")
        lines.append(f"  - {op}: {described or 'no cache-dependent choice'}")
    return lines
