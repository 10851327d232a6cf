"""Memory and time of the sparse-pattern attentions at long N: against `local` and the dense masked form.

    python -m benchmarks.sparse_memory [--length 16384] [--heads 2] [--dim 64] [--names axial bigbird ...]

Each pattern runs with its registry defaults: one causal forward+backward (B=1, H, N, D=M, fp32).
Its keys per query K is the mean number of keys a query attends (``attended_keys``); `local`
with window round(K) attends as many. The dense masked form is the same pattern as an explicit
(H, N, N) bool mask given to ``scaled_dot_product_attention``. Reports the peak extra resident
memory of the pattern and of that `local`, and the times of the pattern and the dense form.
Writes benchmarks/results/sparse_memory.{md,json}.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

import lintf
from benchmarks.measure import median_seconds, peak_extra_mb, release_freed_memory_eagerly, write_report
from lintf.attention.indexed_keys import visible_pairs
from lintf.attention.pattern import PatternAttention
from lintf.registry import ATTENTIONS

HERE = Path(__file__).resolve().parent


def pattern_names() -> list[str]:
    return [name for name in lintf.list_attentions() if issubclass(ATTENTIONS.get(name), PatternAttention)]


def dense_mask(attention: PatternAttention, length: int, heads: int) -> torch.Tensor:
    """(1, H, N, N) bool: the causal pattern as one matrix (the dense masked form's input)."""
    mask = torch.zeros(heads, length * length, dtype=torch.bool)
    for part in attention.key_groups(0, length, length, heads, True, torch.device("cpu")):
        visible, positions = visible_pairs(part, 0, length, True, None)  # (1, Hg, G, Lq, K), (Hg, G, K)
        rows = part.queries.clamp(min=0)[:, :, None] * length  # (G, Lq, 1)
        for index, head in enumerate(range(heads)[part.heads]):
            own = min(index, len(positions) - 1)  # a part shared by its heads has one row of positions
            mask[head, (rows + positions[own, :, None])[visible[0, own]]] = True
    return mask.view(1, heads, length, length)


def forward_backward(attend: Callable[..., Tensor], inputs: tuple[Tensor, ...], upstream: Tensor) -> Callable[[], None]:
    """A call of ``attend(q, k, v)`` and its backward, clearing the gradients after."""
    def run() -> None:
        attend(*inputs).backward(upstream)
        for tensor in inputs:
            tensor.grad = None
    return run


def measure(name: str, length: int, heads: int, dim: int) -> dict[str, float]:
    """Keys per query, peak memory and time of one pattern, of `local` with as many keys, and of the dense form."""
    attention = lintf.build_attention(name, head_dim=dim)
    keys = float(attention.attended_keys(length, heads, causal=True).float().mean())
    local = lintf.build_attention("local", head_dim=dim, window=max(1, round(keys)))
    inputs = tuple(torch.randn(1, heads, length, dim, requires_grad=True) for _ in range(3))
    upstream = torch.randn(1, heads, length, dim)
    sparse = forward_backward(lambda *x: attention(*x, causal=True), inputs, upstream)
    windowed = forward_backward(lambda *x: local(*x, causal=True), inputs, upstream)
    sparse(), windowed()  # warm-up
    row = {"keys_per_query": keys, "peak_mb": peak_extra_mb(sparse), "local_peak_mb": peak_extra_mb(windowed),
           "ms": 1e3 * median_seconds(sparse, repeats=1, warmup=0),
           "local_ms": 1e3 * median_seconds(windowed, repeats=1, warmup=0)}
    mask = dense_mask(attention, length, heads)
    mask |= ~mask.any(-1, keepdim=True)  # a row with no key (none here) would give NaN; timing is the same
    dense = forward_backward(lambda *x: F.scaled_dot_product_attention(*x, attn_mask=mask), inputs, upstream)
    row["dense_ms"] = 1e3 * median_seconds(dense, repeats=1, warmup=1)
    print(f"{name:15s} K={keys:7.1f} peak {row['peak_mb']:8.1f} MiB (local {row['local_peak_mb']:8.1f}) "
          f"{row['ms']:9.1f} ms (local {row['local_ms']:9.1f}, dense masked {row['dense_ms']:9.1f})", flush=True)
    return row


def main() -> None:
    release_freed_memory_eagerly()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=2, help="2: axial has one row and one column head")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--names", nargs="+", default=pattern_names(), choices=pattern_names())
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {name: measure(name, args.length, args.heads, args.dim) for name in args.names}
    lines = [
        "# Sparse patterns at long N: memory against `local`, time against the dense masked form", "",
        f"`python -m benchmarks.sparse_memory --length {args.length} --heads {args.heads} --dim {args.dim}`: one "
        f"causal forward+backward, B=1, H={args.heads}, N={args.length}, D=M={args.dim}, fp32, registry defaults, "
        f"{torch.get_num_threads()} threads, one run. `local` runs with window = the pattern's mean keys per query; "
        "the dense masked form is `scaled_dot_product_attention` with the pattern as an (H, N, N) bool mask.", "",
        "| attention | keys per query | peak extra MiB | `local` peak MiB | ratio | ms | `local` ms | dense masked ms "
        "| dense / sparse |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['keys_per_query']:.0f} | {r['peak_mb']:.0f} | {r['local_peak_mb']:.0f} | "
                     f"{r['peak_mb'] / r['local_peak_mb']:.2f} | {r['ms']:.0f} | {r['local_ms']:.0f} | "
                     f"{r['dense_ms']:.0f} | {r['dense_ms'] / r['ms']:.1f} |")
    write_report(HERE / "results", "sparse_memory", lines, {"settings": vars(args), "results": results})

if __name__ == "__main__":
    main()
