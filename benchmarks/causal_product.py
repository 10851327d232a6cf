"""Causal-product benchmark: the compiled op against fast-transformers, our PyTorch path and SDPA.

    python -m benchmarks.causal_product [--lengths 1024 4096 16384 65536] [--threads 1 2 ...]

B=1, H=8, C=M=64, fp32, q and k elu+1 feature maps; threads default to 1, 2 and all cores (pinned
with torch.set_num_threads). Rows: "lintf op" (the compiled op on the vector path this CPU
selects), "lintf op, state" (the same continuing from an initial state and returning the final
one), "lintf op [<path>]" (the op with LINTF_CPU_PATH forcing a narrower vector path for the
forward and the backward), "[..., recompute]" (LINTF_CPU_BACKWARD=recompute: the constant-memory
backward; the rows without it run the default, auto, which at this shape keeps a state every 256
positions for the backward), "lintf pytorch" (the pure-PyTorch path), "sdpa"
(`scaled_dot_product_attention(is_causal=True)`, while its O(N^2) time fits) and
"fast-transformers" (pytorch-fast-transformers 0.4.0, imported only here, when installed: its
CPU `causal_dot_product` plus its normaliser computed in PyTorch the way its
CausalLinearAttention does). Times: median of 7 calls (3 when a call takes over half a second)
after a warm-up call, the thread counts taking turns call by call; inputs and the upstream gradient
of forward+backward are made once, outside the timed calls. GFLOP/s count the minimal work,
4NCM per head forward and 12NCM forward+backward, against an fp32 matmul (square, 2048^2, fastest of 7
calls) measured in the same run with the same number of threads; target lines state whether the op's
forward+backward at N=16384 on one thread reaches 60% of it, on each vector path and backward mode. Memory: peak extra resident MB of
one call over its inputs (outputs and gradients included), in a child process whose glibc returns
freed blocks to the OS at once and with the op's output cache off. "first touch" times filling a fresh
output-sized tensor with 4 KB pages and with 2 MB pages (MADV_HUGEPAGE), the cost an output pays
before any arithmetic when its buffer is not reused from the op's output cache; the memory read
bandwidth (summing 128 MB) bounds how fast inputs and outputs can move at all.
Writes benchmarks/results/causal_product.{md,json,png} (``--replot`` redraws the PNG from the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import torch
import torch.nn.functional as F

from lintf.ops import (LinearAttentionState, causal_linear_attention, compiled_op_available, cpu_output_cache_stats,
                       cpu_vector_path, cpu_vector_paths)
from lintf.ops.causal.chunked import causal_linear_attention_pytorch
from lintf.ops.common.tuning import cpu_tuning, tuning_lines

from benchmarks.measure import (environment_variable, peak_extra_mb, positive_int, run_isolated,
                                seconds_per_thread_count)

HEADS, DIM = 8, 64
SDPA_MAX_N = 16384  # its O(N^2) fwd+bwd takes ~a minute per call beyond this on one core
RESULTS = Path(__file__).parent / "results"
Fn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def fast_transformers_attention() -> Fn | None:
    """The reference library's causal linear attention (numerator kernel + PyTorch normaliser)."""
    try:
        from fast_transformers.causal_product import causal_dot_product
    except ImportError:
        return None

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        normaliser = 1 / (torch.einsum("bhnc,bhnc->bhn", q, k.cumsum(2)) + eps)  # (B, H, N)
        return causal_dot_product(q, k, v) * normaliser[..., None]

    return attention


def op_with_state(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The compiled op from an initial state (B, H, C, M) + (B, H, C), also returning the final state."""
    batch, heads, _, features = q.shape
    start = LinearAttentionState(q.new_zeros(batch, heads, features, v.shape[-1]), q.new_zeros(batch, heads, features))
    out, _ = causal_linear_attention(q, k, v, initial_state=start, return_state=True)
    return out


@dataclasses.dataclass(frozen=True)
class ForcedOp:
    """The compiled op with LINTF_CPU_PATH forcing a vector path and LINTF_CPU_BACKWARD a backward mode (None:
    as the environment says). run_once keeps both forced through the backward too, which runs after this call
    has returned."""

    path: str | None = None
    backward: str | None = None

    def settings(self) -> contextlib.ExitStack:
        """The forced variables, as one context."""
        stack = contextlib.ExitStack()
        for name, value in (("LINTF_CPU_PATH", self.path), ("LINTF_CPU_BACKWARD", self.backward)):
            if value is not None:
                stack.enter_context(environment_variable(name, value))
        return stack

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with self.settings():
            return causal_linear_attention(q, k, v)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def implementations() -> dict[str, Fn]:
    if not compiled_op_available("cpu"):
        sys.exit("the compiled op is not available; see the warning above")
    impls: dict[str, Fn] = {"lintf op": causal_linear_attention, "lintf op [recompute]": ForcedOp(None, "recompute"),
                            "lintf op, state": op_with_state}
    for path in cpu_vector_paths()[1:]:
        impls.update({f"lintf op [{path}]": ForcedOp(path), f"lintf op [{path}, recompute]": ForcedOp(path, "recompute")})
    impls.update({"lintf pytorch": causal_linear_attention_pytorch, "sdpa": sdpa})
    reference = fast_transformers_attention()
    if reference is not None:
        impls["fast-transformers"] = reference
    return impls


def inputs(n: int, requires_grad: bool) -> list[torch.Tensor]:
    q, k = (F.elu(torch.randn(1, HEADS, n, DIM)) + 1 for _ in range(2))
    return [t.requires_grad_(requires_grad) for t in (q, k, torch.randn(1, HEADS, n, DIM))]


def run_once(fn: Fn, tensors: list[torch.Tensor], upstream: torch.Tensor | None) -> None:
    """One forward call, or with an upstream gradient (made once, like the inputs) forward+backward;
    a ForcedOp's settings stay forced for both."""
    forced = fn.settings() if isinstance(fn, ForcedOp) else contextlib.nullcontext()
    with forced:
        if upstream is None:
            with torch.no_grad():
                fn(*tensors)
            return
        out = fn(*tensors)
        grads = torch.autograd.grad(out, tensors, upstream)
        del out, grads


def seconds(fn: Callable[[], object], threads: int,
            statistic: Callable[[list[float]], float] = statistics.median) -> float:
    """Median (or `statistic`) wall time of `fn` on `threads` threads (see seconds_per_thread_count)."""
    return seconds_per_thread_count(fn, [threads], statistic=statistic)[threads]


def matmul_gflops(threads: int, size: int = 2048) -> float:
    """fp32 matmul throughput with `threads` threads, fastest of 7 calls: the machine's practical peak
    (a slower call measures the shared host's load, not what the cores can do)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    return 2 * size**3 / seconds(lambda: a @ b, threads, statistic=min) / 1e9


def read_gbs(threads: int, megabytes: int = 128) -> float:
    """Memory read bandwidth in GB/s with `threads` threads: the median time to sum an fp32 tensor of
    `megabytes` MB, many times the caches."""
    x = torch.ones(megabytes * 2**20 // 4)
    return x.nbytes / seconds(lambda: x.sum(), threads) / 1e9


def first_touch_ms(threads: int, huge_pages: bool, n: int = 16384) -> float:
    """Median ms to allocate and fill a fresh (1, H, n, M) fp32 tensor, with 4 KB or 2 MB pages."""
    libc = ctypes.CDLL(None)

    def fill() -> None:
        t = torch.empty(1, HEADS, n, DIM)
        if huge_pages:
            begin, end = t.data_ptr(), t.data_ptr() + t.nbytes
            first, last = -(-begin // (1 << 21)) * (1 << 21), end // (1 << 21) * (1 << 21)
            libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(max(0, last - first)), 14)  # MADV_HUGEPAGE
        t.fill_(1.0)

    return 1e3 * seconds(fill, threads)


def cases(impls: dict[str, Fn], lengths: list[int]) -> Iterator[tuple[int, str, str, Callable[[], None]]]:
    """(N, implementation, mode, one call on fresh inputs) for every measured combination; SDPA only
    while its O(N^2) time fits."""
    for n in lengths:
        for name, fn in impls.items():
            if name == "sdpa" and n > SDPA_MAX_N:
                continue
            for mode, backward in (("fwd", False), ("fwd+bwd", True)):
                tensors = inputs(n, backward)
                upstream = torch.ones_like(tensors[2]) if backward else None
                yield n, name, mode, functools.partial(run_once, fn, tensors, upstream)


def measure_memory(impls: dict[str, Fn], lengths: list[int]) -> dict[str, float]:
    """Peak extra MiB per "impl|N|mode"; run it in a process started under measure.MEMORY_TRACKING_ENV."""
    torch.set_num_threads(1)
    peaks = {}
    for n, name, mode, call in cases(impls, lengths):
        call()  # warm-up: lazy initialisation is not the op's memory
        peaks[f"{name}|{n}|{mode}"] = peak_extra_mb(call)
    return peaks


def memory_in_child(lengths: list[int]) -> dict[str, float]:
    result = run_isolated("benchmarks.causal_product", "--memory-only", "--lengths", *map(str, lengths), timeout=None)
    if "error" in result:
        raise RuntimeError(f"memory measurement of the causal product failed: {result['error']}")
    return result


def with_rates(row: dict, peak: float) -> dict:
    """Adds GFLOP/s (minimal work: 4NCM per head forward, three times that forward+backward) and % of peak."""
    flops = 4 * row["N"] * DIM * DIM * HEADS
    row["fwd GFLOP/s"] = flops / row["fwd ms"] / 1e6
    row["fwd+bwd GFLOP/s"] = 3 * flops / row["fwd+bwd ms"] / 1e6
    for mode in ("fwd", "fwd+bwd"):
        row[f"{mode} % peak"] = 100 * row[f"{mode} GFLOP/s"] / peak
    return row


def measure(impls: dict[str, Fn], lengths: list[int], threads: list[int], memory: dict[str, float],
            peaks: dict[int, float]) -> list[dict]:
    """One row per (threads, N, implementation) with times, GFLOP/s, % of the matmul peak and memory."""
    rows = {}
    for n, name, mode, call in cases(impls, lengths):
        for n_threads, wall in seconds_per_thread_count(call, threads).items():
            row = rows.setdefault((n_threads, n, name), {"threads": n_threads, "N": n, "impl": name})
            row[f"{mode} ms"] = 1e3 * wall
            row[f"{mode} MB"] = memory[f"{name}|{n}|{mode}"]
        if mode == "fwd+bwd":
            for n_threads in threads:
                print(with_rates(rows[(n_threads, n, name)], peaks[n_threads]), flush=True)
    order = {name: i for i, name in enumerate(impls)}
    return sorted(rows.values(), key=lambda r: (threads.index(r["threads"]), r["N"], order[r["impl"]]))


def table(rows: list[dict], n_threads: int) -> str:
    cols = ["N", "impl", "fwd ms", "fwd+bwd ms", "fwd GFLOP/s", "fwd+bwd GFLOP/s", "fwd % peak", "fwd+bwd % peak",
            "fwd MB", "fwd+bwd MB"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in (r for r in rows if r["threads"] == n_threads):
        lines.append("| " + " | ".join(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |")
    return "\n".join(lines)


def scaling(rows: list[dict], n: int, threads: list[int], peaks: dict[int, float]) -> list[str]:
    """Thread sweep at length n: times, speedup over one thread, and the op against fast-transformers."""
    at = {(r["impl"], r["threads"]): r for r in rows if r["N"] == n}
    head = ["impl"] + [f"{mode} ms ({t} thr)" for mode in ("fwd", "fwd+bwd") for t in threads]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for impl in dict.fromkeys(r["impl"] for r in rows if r["N"] == n):
        cells = [impl]
        for mode in ("fwd", "fwd+bwd"):
            for t in threads:
                ms, one = at[(impl, t)][f"{mode} ms"], at[(impl, threads[0])][f"{mode} ms"]
                cells.append(f"{ms:.1f}" + ("" if t == threads[0] else f" ({one / ms:.2f}x)"))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| fp32 matmul GFLOP/s | " + " | ".join(
        f"{peaks[t]:.1f}" + ("" if t == threads[0] else f" ({peaks[t] / peaks[threads[0]]:.2f}x)") for t in threads
    ) + " | " + " | ".join("" for _ in threads) + " |")
    lines.append("\nSpeedups in parentheses are over the same row's first column; every number comes from this run.")
    if "fast-transformers" in {impl for impl, _ in at}:
        for t in threads:
            ours, ref = at[("lintf op", t)], at[("fast-transformers", t)]
            lines.append(f"- {t} thread(s): lintf op is {ref['fwd ms'] / ours['fwd ms']:.2f}x faster than "
                         f"fast-transformers forward, {ref['fwd+bwd ms'] / ours['fwd+bwd ms']:.2f}x forward+backward")
        for impl in (i for i, t in at if t == threads[0] and i.startswith("lintf op [")):
            ours, ref = at[(impl, threads[0])], at[("fast-transformers", threads[0])]
            lines.append(f"- {threads[0]} thread(s): {impl} is {ref['fwd ms'] / ours['fwd ms']:.2f}x / "
                         f"{ref['fwd+bwd ms'] / ours['fwd+bwd ms']:.2f}x faster than fast-transformers (fwd / fwd+bwd)")
    one = at[("lintf op", threads[0])]
    lines.append(f"- lintf op, {threads[0]} thread(s): forward {one['fwd % peak']:.0f}%, forward+backward "
                 f"{one['fwd+bwd % peak']:.0f}% of the {peaks[threads[0]]:.1f} GFLOP/s fp32 matmul")
    return lines


TARGET_SHARE = 60  # % of the one-thread fp32 matmul peak that forward+backward at N=16384 should reach


def targets(rows: list[dict], n: int, threads: int) -> list[str]:
    """Whether each compiled-op row (vector path, backward mode) reaches TARGET_SHARE forward+backward at length n."""
    lines = []
    for row in (r for r in rows if r["N"] == n and r["threads"] == threads and r["impl"].startswith("lintf op")):
        if row["impl"] == "lintf op, state":
            continue
        share = row["fwd+bwd % peak"]
        lines.append(f"- target: {row['impl']} forward+backward at N={n}, {threads} thread(s) >= {TARGET_SHARE}% "
                     f"of the matmul: {'met' if share >= TARGET_SHARE else 'missed'}, {share:.0f}% "
                     f"({share / TARGET_SHARE:.2f}x the target), peak extra memory {row['fwd+bwd MB']:.0f} MB")
    return lines


def plot(rows: list[dict], threads: list[int], n_ref: int, path: Path) -> None:
    """Time against N (forward, forward+backward) and the thread scaling at n_ref. Each implementation has its
    own colour and marker; thread counts differ in line style and marker fill, forward and backward likewise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from benchmarks.plot_style import legend_beside, save, series_style

    impls = list(dict.fromkeys(r["impl"] for r in rows))
    lines = ("-", "--", ":", "-.")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key in zip(axes, ["fwd ms", "fwd+bwd ms"]):
        for rank, n_threads in enumerate(threads):
            for index, impl in enumerate(impls):
                pts = [(r["N"], r[key]) for r in rows if r["impl"] == impl and r["threads"] == n_threads]
                style = series_style(index)
                ax.loglog(*zip(*pts), linestyle=lines[rank % len(lines)], markersize=6, **style,
                          markerfacecolor=style["color"] if rank == 0 else "white")
        ax.set(xlabel="sequence length N", ylabel=key, title=f"{key}, B=1 H={HEADS} C=M={DIM} fp32")
        ax.grid(True, which="both", alpha=0.3)
    for index, impl in enumerate(impls):
        if impl.startswith("lintf op") or impl == "fast-transformers":
            for linestyle, key in (("-", "fwd ms"), ("--", "fwd+bwd ms")):
                pts = {r["threads"]: r[key] for r in rows if r["impl"] == impl and r["N"] == n_ref}
                axes[2].plot(threads, [pts[threads[0]] / pts[t] for t in threads], linestyle=linestyle,
                             markersize=6, **series_style(index))
    axes[2].set(xlabel="threads", ylabel="speedup over 1 thread", title=f"thread scaling at N={n_ref}",
                xticks=threads)
    axes[2].grid(True, alpha=0.3)
    handles = [Line2D([], [], linestyle="-", markersize=6, **series_style(i)) for i in range(len(impls))]
    handles += [Line2D([], [], color="black", marker="o", linestyle=lines[rank % len(lines)],
                       markerfacecolor="black" if rank == 0 else "white") for rank in range(len(threads))]
    handles += [Line2D([], [], color="black", linestyle=style) for style in ("-", "--")]
    labels = impls + [f"{t} thread{'s' if t > 1 else ''}" for t in threads] + ["speedup: fwd", "speedup: fwd+bwd"]
    legend_beside(fig, axes, handles, labels)
    save(fig, path)
    plt.close(fig)


def replot(path: Path) -> None:
    """Redraw the PNG beside ``path`` (causal_product.json) from its rows."""
    saved = json.loads(path.read_text())
    plot(saved["rows"], saved["threads"], saved["n_ref"], path.with_suffix(".png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--threads", type=positive_int, nargs="+", default=sorted({1, 2, os.cpu_count() or 1}))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from --out's causal_product.json, "
                        "without measuring")
    args = parser.parse_args()
    if args.replot:
        replot(args.out / "causal_product.json")
        return
    torch.manual_seed(0)
    impls = implementations()
    if args.memory_only:
        print(json.dumps(measure_memory(impls, args.lengths)))
        return
    memory = memory_in_child(args.lengths)
    load_before = os.getloadavg()[0]
    peaks_before = {t: matmul_gflops(t) for t in args.threads}
    touch = {(t, huge): first_touch_ms(t, huge) for t in args.threads for huge in (False, True)}
    bandwidth = {t: read_gbs(t) for t in args.threads}
    rows = measure(impls, args.lengths, args.threads, memory, peaks_before)
    peaks_after = {t: matmul_gflops(t) for t in args.threads}
    load_after = os.getloadavg()[0]
    # The peak is what the cores did at their fastest: a load on the host during one of the two
    # measurements lowers it, and a lower peak would flatter every share.
    peaks = {t: max(peaks_before[t], peaks_after[t]) for t in args.threads}
    for row in rows:
        with_rates(row, peaks[row["threads"]])
    n_ref = 16384 if 16384 in args.lengths else args.lengths[-1]
    cache_mb = (cpu_output_cache_stats() or {}).get("limit_bytes", 0) >> 20
    cache_bound = ("LINTF_CPU_OUTPUT_CACHE_MB" if os.environ.get("LINTF_CPU_OUTPUT_CACHE_MB")
                   else "the default: the run's peak of live outputs plus one buffer")
    ft = f"pytorch-fast-transformers {metadata.version('pytorch-fast-transformers')}" if "fast-transformers" in impls \
        else "fast-transformers not installed (its setup.py needs a CUDA toolkit on PATH or a patched build)"
    text = [
        "# Causal product benchmark\n\n",
        (f"`python -m benchmarks.causal_product{''.join(' ' + a for a in sys.argv[1:])}` (torch {torch.__version__}, "
         f"{ft}).\n\n"),
        f"- {os.cpu_count()} logical cores; the op's vector path in this run: {cpu_vector_path()}\n",
        *(line + "\n" for line in tuning_lines(cpu_tuning(DIM, DIM, torch.float32))),
        f"- output cache of the op: bound {cache_mb} MB at the end of the run ({cache_bound}; freed outputs' "
        "buffers are reused; the memory columns are measured with it off, LINTF_CPU_OUTPUT_CACHE_MB=0)\n",
        f"- load average (1 min) before / after the timings: {load_before:.2f} / {load_after:.2f}\n",
        "- fp32 matmul (2048^2, fastest of 7 calls, before / after the timings; % peak is against the larger): "
        + ", ".join(f"{peaks_before[t]:.1f} / {peaks_after[t]:.1f} GFLOP/s on {t} thread(s)" for t in args.threads)
        + "\n",
        "- first touch of a fresh 32 MB output (allocate + fill): " + ", ".join(
            f"{touch[(t, False)]:.1f} ms with 4 KB pages / {touch[(t, True)]:.1f} ms with 2 MB pages on {t} thread(s)"
            for t in args.threads) + "\n",
        "- memory read bandwidth (sum of 128 MB): " + ", ".join(
            f"{bandwidth[t]:.1f} GB/s on {t} thread(s)" for t in args.threads) + "\n\n",
        "Times are medians; % peak is against the matmul with the same number of threads. Memory: peak extra "
        "resident MB of one call over its inputs.\n",
        f"\n## Thread scaling at N={n_ref}\n\n" + "\n".join(scaling(rows, n_ref, args.threads, peaks)) + "\n",
        "\n## Targets\n\n" + "\n".join(targets(rows, n_ref, args.threads[0])) + "\n",
    ]
    for n_threads in args.threads:
        text.append(f"\n## {n_threads} thread(s)\n\n{table(rows, n_threads)}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "causal_product.md").write_text("".join(text))
    saved = {"threads": args.threads, "n_ref": n_ref, "matmul_gflops": {"before": peaks_before, "after": peaks_after},
             "rows": rows}
    (args.out / "causal_product.json").write_text(json.dumps(saved, indent=1) + "\n")
    plot(rows, args.threads, n_ref, args.out / "causal_product.png")
    print("".join(text))


if __name__ == "__main__":
    main()
