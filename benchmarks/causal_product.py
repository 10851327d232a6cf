"""Causal-product benchmark: our compiled op vs our pure-PyTorch path, SDPA and fast-transformers.

    python -m benchmarks.causal_product [--lengths 1024 4096 16384 65536] [--threads 1 2]

B=1, H=8, C=M=64, fp32, q and k elu+1 feature maps. "lintf op, state" is the compiled op
continuing from an initial state and returning its final state (the cost of carrying a state). For each thread count (pinned with
torch.set_num_threads) and length N: forward and forward+backward wall time (best of repeats)
and the peak extra resident memory of one call over its inputs (outputs and gradients
included; Linux's resettable VmHWM, measured in a child process whose glibc returns large blocks
to the OS at once; timings run with the default allocator).
"fast-transformers" is the paper's library (pytorch-fast-transformers 0.4.0, imported only here,
when installed): its CPU `causal_dot_product` plus its normaliser computed in PyTorch the way its
CausalLinearAttention does. SDPA is `scaled_dot_product_attention(is_causal=True)`, run while
its O(N^2) time fits the budget. GFLOP/s count the minimal work, 4NCM per head forward and 12NCM
forward+backward, against a measured single-thread fp32 matmul peak. Writes
benchmarks/results/causal_product.{md,png} and prints the same tables and the target ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lintf.ops import LinearAttentionState, causal_linear_attention, compiled_op_available
from lintf.ops.fallback import causal_linear_attention_pytorch

from benchmarks.measure import peak_extra_mb, run_isolated

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


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def implementations() -> dict[str, Fn]:
    if not compiled_op_available("cpu"):
        sys.exit("the compiled op is not available; see the warning above")
    impls: dict[str, Fn] = {"lintf op": causal_linear_attention, "lintf op, state": op_with_state,
                            "lintf pytorch": causal_linear_attention_pytorch}
    impls["sdpa"] = sdpa
    reference = fast_transformers_attention()
    if reference is not None:
        impls["fast-transformers"] = reference
    return impls


def inputs(n: int, requires_grad: bool) -> list[torch.Tensor]:
    q, k = (F.elu(torch.randn(1, HEADS, n, DIM)) + 1 for _ in range(2))
    return [t.requires_grad_(requires_grad) for t in (q, k, torch.randn(1, HEADS, n, DIM))]


def run_once(fn: Fn, tensors: list[torch.Tensor], backward: bool) -> None:
    if not backward:
        with torch.no_grad():
            fn(*tensors)
        return
    out = fn(*tensors)
    grads = torch.autograd.grad(out, tensors, torch.ones_like(out))
    del out, grads


def seconds(fn: Fn, tensors: list[torch.Tensor], backward: bool, budget_s: float = 2.0) -> float:
    """Best wall time of 1 to 20 calls (about budget_s) after a warm-up call.

    The minimum, not the median: on a shared machine other processes only ever add time.
    """
    start = time.perf_counter()
    run_once(fn, tensors, backward)
    times = []
    for _ in range(max(1, min(20, int(budget_s / max(time.perf_counter() - start, 1e-4))))):
        start = time.perf_counter()
        run_once(fn, tensors, backward)
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak_gflops(size: int = 2048) -> float:
    """Single-thread fp32 matmul throughput: the machine's practical peak."""
    torch.set_num_threads(1)
    a, b = torch.randn(size, size), torch.randn(size, size)
    elapsed = min(seconds(lambda x, y, _: x @ y, [a, b, a], False, 0.5) for _ in range(3))
    return 2 * size**3 / elapsed / 1e9


def measure_memory(impls: dict[str, Fn], lengths: list[int]) -> dict[str, float]:
    """Peak extra MiB per "impl|N|mode"; run it in a process started with MALLOC_MMAP_THRESHOLD_ set."""
    torch.set_num_threads(1)
    peaks = {}
    for n in lengths:
        for name, fn in impls.items():
            if name == "sdpa" and n > SDPA_MAX_N:
                continue
            for mode, backward in (("fwd", False), ("fwd+bwd", True)):
                tensors = inputs(n, backward)
                run_once(fn, tensors, backward)  # warm-up: lazy initialisation is not the op's memory
                peaks[f"{name}|{n}|{mode}"] = peak_extra_mb(lambda: run_once(fn, tensors, backward))
    return peaks


def memory_in_child(lengths: list[int]) -> dict[str, float]:
    """measure_memory in a fresh process whose glibc hands big blocks straight back to the OS, so
    resident memory follows live tensors (timings stay in this process, with default malloc)."""
    result = run_isolated("benchmarks.causal_product", "--memory-only", "--lengths", *map(str, lengths), timeout=None)
    if "error" in result:
        raise RuntimeError(f"memory measurement of the causal product failed: {result['error']}")
    return result


def measure(impls: dict[str, Fn], lengths: list[int], threads: list[int], memory: dict[str, float]) -> list[dict]:
    """One row per (threads, N, implementation) with times, GFLOP/s and memory."""
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for n in lengths:
            for name, fn in impls.items():
                if name == "sdpa" and n > SDPA_MAX_N:
                    continue
                row = {"threads": n_threads, "N": n, "impl": name}
                for mode, backward in (("fwd", False), ("fwd+bwd", True)):
                    row[f"{mode} ms"] = 1e3 * seconds(fn, inputs(n, backward), backward)
                    row[f"{mode} MB"] = memory[f"{name}|{n}|{mode}"]
                flops = 4 * n * DIM * DIM * HEADS
                row["fwd GFLOP/s"] = flops / row["fwd ms"] / 1e6
                row["fwd+bwd GFLOP/s"] = 3 * flops / row["fwd+bwd ms"] / 1e6
                rows.append(row)
                print(row, flush=True)
    return rows


def table(rows: list[dict], n_threads: int, peak: float) -> str:
    cols = ["N", "impl", "fwd ms", "fwd+bwd ms", "fwd GFLOP/s", "fwd+bwd GFLOP/s", "fwd MB", "fwd+bwd MB"]
    lines = ["| " + " | ".join(cols + ["fwd % peak"]) + " |", "|" + "---|" * (len(cols) + 1)]
    for row in (r for r in rows if r["threads"] == n_threads):
        cells = [f"{row[c]:.1f}" if isinstance(row.get(c), float) else str(row.get(c, "-")) for c in cols]
        lines.append("| " + " | ".join(cells + [f"{100 * row['fwd GFLOP/s'] / peak:.0f}%"]) + " |")
    return "\n".join(lines)


def ratios(rows: list[dict], n: int, peak: float) -> list[str]:
    """The issue's targets at N=n, one thread, from this run."""
    at = {r["impl"]: r for r in rows if r["threads"] == 1 and r["N"] == n}
    ours = at["lintf op"]
    lines = [f"forward: {ours['fwd GFLOP/s']:.1f} GFLOP/s = {100 * ours['fwd GFLOP/s'] / peak:.0f}% of the "
             f"{peak:.1f} GFLOP/s matmul peak (target >= 25%)"]
    checks = [("fast-transformers", "fwd ms", 2.5), ("fast-transformers", "fwd+bwd ms", 3.0),
              ("sdpa", "fwd+bwd ms", 40.0), ("lintf pytorch", "fwd ms", None), ("lintf pytorch", "fwd+bwd ms", None)]
    for other, key, target in checks:
        if other in at:
            goal = f" (target >= {target}x)" if target else ""
            lines.append(f"{key[:-3]}: {at[other][key] / ours[key]:.1f}x faster than {other}{goal}")
    if "lintf op, state" in at:
        state = at["lintf op, state"]
        lines.append(f"carrying a state (initial in, final out): fwd {state['fwd ms'] / ours['fwd ms']:.2f}x, "
                     f"fwd+bwd {state['fwd+bwd ms'] / ours['fwd+bwd ms']:.2f}x the time without")
    if "fast-transformers" in at and "fwd+bwd MB" in ours:
        ref = at["fast-transformers"]
        lines.append(f"peak extra memory fwd / fwd+bwd: {ours['fwd MB']:.0f} / {ours['fwd+bwd MB']:.0f} MB vs "
                     f"fast-transformers {ref['fwd MB']:.0f} / {ref['fwd+bwd MB']:.0f} MB (target: no worse)")
    return lines


def plot(rows: list[dict], threads: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["fwd ms", "fwd+bwd ms", "fwd+bwd MB"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, axes = plt.subplots(1, len(keys), figsize=(15, 4.5))
    for ax, key in zip(axes, keys):
        for n_threads in threads if key.endswith("ms") else threads[:1]:
            for color, impl in enumerate(impls):
                pts = [(r["N"], r[key]) for r in rows if r["impl"] == impl and r["threads"] == n_threads and key in r]
                if pts:
                    style = "-o" if n_threads == threads[0] else "--x"
                    ax.loglog(*zip(*pts), style, color=f"C{color}", label=f"{impl} ({n_threads} thr)")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(key)
        ax.set_title(f"{key}, B=1 H={HEADS} C=M={DIM} fp32")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.manual_seed(0)
    impls = implementations()
    if args.memory_only:
        print(json.dumps(measure_memory(impls, args.lengths)))
        return
    memory = memory_in_child(args.lengths)
    load_before = os.getloadavg()[0]
    peak = matmul_peak_gflops()
    rows = measure(impls, args.lengths, args.threads, memory)
    n_ref = 16384 if 16384 in args.lengths else args.lengths[-1]
    text = [f"# Causal product benchmark\n\n`python -m benchmarks.causal_product` ({torch.__version__}, "
            f"{os.cpu_count()} cores). Single-thread fp32 matmul peak: {peak:.1f} GFLOP/s.\n"
            "Memory: peak extra resident MB of one call over its inputs (outputs and gradients included).\n"
            f"Load average (1 min) before / after the timings: {load_before:.1f} / {os.getloadavg()[0]:.1f}; "
            "multi-thread rows only show scaling when the machine is otherwise idle.\n"]
    for n_threads in args.threads:
        text.append(f"\n## {n_threads} thread(s)\n\n{table(rows, n_threads, peak)}\n")
    text.append(f"\n## Targets at N={n_ref}, 1 thread\n\n" + "\n".join(f"- {line}" for line in ratios(rows, n_ref, peak)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "causal_product.md").write_text("".join(text) + "\n")
    plot(rows, args.threads, args.out / "causal_product.png")
    print("".join(text))


if __name__ == "__main__":
    main()
