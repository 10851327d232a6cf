"""Decayed causal product benchmark: the compiled CPU op's share of the fp32 matmul peak, per vector path and backward.

    python -m benchmarks.decayed_product [--lengths 1024 4096 16384] [--repeats 5]

Everything goes through ``lintf.ops.decayed_dot_product``. B=1, H=8, C=M=64, fp32 q, k, v,
log_decay uniform in [-0.1, 0] (data-dependent decays like gated linear attention's, so the
backward computes the gradient of log_decay too), one thread (torch.set_num_threads(1)).

For every vector path this CPU runs (LINTF_CPU_PATH) the compiled op's forward (no gradients) and
forward+backward (gradients for q, k, v and log_decay) under both backward modes
(LINTF_CPU_BACKWARD=recompute: chunk states recomputed, memory constant in N; stored: the forward
keeps the state every 256 positions), then the PyTorch chunked path (LINTF_EXTENSION=off, chunks
of 64, autograd backward). Times are medians of `repeats` calls after one warm-up call; the two
modes' forward+backward calls alternate. Shares of the peak count the minimal work of the recurrent
form, 4NCM flops per head forward and 12NCM forward+backward, against the one-thread fp32 matmul
peak (fastest of 7 calls of a 2048^3 product) measured before and after the op in the same run (the
higher of the two). MB: peak extra resident memory of one forward+backward call over its inputs
(outputs, gradients and kept states included). Writes benchmarks/results/decayed_product.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from lintf.ops import cpu_vector_paths, decayed_dot_product
from lintf.ops.common.tuning import cpu_model, cpu_tuning, kept_state_span, tuning_lines
from lintf.ops.decayed.compiled import serves

from benchmarks.causal_product import matmul_gflops
from benchmarks.measure import environment_variable, median_seconds, peak_extra_mb, release_freed_memory_eagerly

HEADS, DIM = 8, 64
MODES = ("recompute", "stored")
TARGET_N, TARGET_SHARE = 16384, 50.0  # forward+backward at N=16384: at least 50% of the matmul peak
RESULTS = Path(__file__).parent / "results"


def inputs(n: int, requires_grad: bool) -> list[torch.Tensor]:
    """q, k (1, H, N, C), v (1, H, N, M), log_decay (1, H, N)."""
    q, k, v = (torch.randn(1, HEADS, n, DIM) for _ in range(3))
    log_decay = -0.1 * torch.rand(1, HEADS, n)
    return [t.requires_grad_(requires_grad) for t in (q, k, v, log_decay)]


def call(tensors: list[torch.Tensor], backward: bool, env: dict[str, str | None]) -> Callable[[], None]:
    """One forward (and backward) of the decayed product on tensors, under the environment variables env."""
    upstream = torch.randn_like(tensors[2])

    def run() -> None:
        with contextlib.ExitStack() as stack:
            for name, value in env.items():
                stack.enter_context(environment_variable(name, value))
            out = decayed_dot_product(*tensors)
            if backward:
                out.backward(upstream)
                for tensor in tensors:
                    tensor.grad = None

    return run


def alternating_medians(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds of each fn, their calls taking turns (one untimed warm-up call each first)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def measure_path(n: int, path: str, repeats: int) -> list[dict]:
    """Rows of the compiled op on one vector path: forward, and forward+backward and memory per mode."""
    with torch.no_grad():
        forward = median_seconds(call(inputs(n, False), False, {"LINTF_CPU_PATH": path}), repeats)
    tensors = inputs(n, True)
    envs = {mode: {"LINTF_CPU_PATH": path, "LINTF_CPU_BACKWARD": mode} for mode in MODES}
    both = alternating_medians({mode: call(tensors, True, env) for mode, env in envs.items()}, repeats)
    return [{"N": n, "impl": f"op {path} {mode}", "fwd ms": 1e3 * forward, "fwd+bwd ms": 1e3 * both[mode],
             "MB": peak_extra_mb(call(tensors, True, envs[mode]))} for mode in MODES]


def measure_pytorch(n: int, repeats: int) -> dict:
    """The PyTorch chunked path's row (LINTF_EXTENSION=off)."""
    env = {"LINTF_EXTENSION": "off"}
    with torch.no_grad():
        forward = median_seconds(call(inputs(n, False), False, env), repeats)
    tensors = inputs(n, True)
    both = median_seconds(call(tensors, True, env), repeats)
    return {"N": n, "impl": "pytorch", "fwd ms": 1e3 * forward, "fwd+bwd ms": 1e3 * both,
            "MB": peak_extra_mb(call(tensors, True, env))}


def with_shares(row: dict, peak: float) -> dict:
    """Adds the shares of the matmul peak (GFLOP/s) on the minimal work: 4NCM per head forward, 12NCM both."""
    flops = 4 * row["N"] * DIM * DIM * HEADS
    row["fwd % peak"] = 100 * flops / row["fwd ms"] / 1e6 / peak
    row["fwd+bwd % peak"] = 100 * 3 * flops / row["fwd+bwd ms"] / 1e6 / peak
    return row


def target_lines(rows: list[dict]) -> list[str]:
    """Met or missed, with the ratio to the target, for every compiled row at TARGET_N."""
    lines = []
    for row in rows:
        if row["N"] == TARGET_N and row["impl"].startswith("op "):
            share = row["fwd+bwd % peak"]
            verdict = "met" if share >= TARGET_SHARE else "missed"
            lines.append(f"- {row['impl']}: forward+backward {share:.0f}% of the peak at N={TARGET_N}, target "
                         f"{TARGET_SHARE:.0f}%: {verdict} ({share / TARGET_SHARE:.2f} of the target)")
    return lines or [f"- no compiled row at N={TARGET_N}: the target was not measured"]


def report(rows: list[dict], repeats: int, peaks: tuple[float, float], load: tuple[float, float]) -> list[str]:
    lines = [
        "# Decayed causal product benchmark",
        "",
        f"`python -m benchmarks.decayed_product{''.join(' ' + a for a in sys.argv[1:])}`",
        "",
        *tuning_lines(cpu_tuning(DIM, DIM, torch.float32)),
        "",
        f"torch {torch.__version__}; CPU: {cpu_model()}; vector paths: {', '.join(cpu_vector_paths())}; 1 thread.",
        f"B=1, H={HEADS}, C=M={DIM}, fp32, log_decay in [-0.1, 0]; median of {repeats} calls after a warm-up call,",
        "the two backward modes' calls alternating. `op <path> <mode>`: the compiled op on that vector path with",
        f"LINTF_CPU_BACKWARD=<mode> (stored: a state kept every {kept_state_span('decayed', DIM, DIM, 4)} positions); `pytorch`: the PyTorch",
        "chunked path (LINTF_EXTENSION=off). % peak: 4NCM (forward) and 12NCM (forward+backward) flops per head",
        f"against the one-thread fp32 matmul peak, {max(peaks):.1f} GFLOP/s (before / after the op: "
        f"{peaks[0]:.1f} / {peaks[1]:.1f}).",
        "MB: peak extra resident memory of one fwd+bwd call (kept states included).",
        f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores.",
        "",
        "| N | impl | fwd ms | fwd+bwd ms | fwd % peak | fwd+bwd % peak | MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['N']} | {row['impl']} | {row['fwd ms']:.1f} | {row['fwd+bwd ms']:.1f} "
                     f"| {row['fwd % peak']:.0f} | {row['fwd+bwd % peak']:.0f} | {row['MB']:.0f} |")
    return [*lines, "", "Target:", "", *target_lines(rows)]


def main() -> None:
    release_freed_memory_eagerly()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, TARGET_N])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if not serves(torch.device("cpu")):
        raise SystemExit("the compiled decayed product is not available (see the build warnings)")
    load_before, peak_before = os.getloadavg()[0], matmul_gflops(1)
    rows = []
    for n in args.lengths:
        for path in cpu_vector_paths():
            rows += measure_path(n, path, args.repeats)
        rows.append(measure_pytorch(n, args.repeats))
    peaks = (peak_before, matmul_gflops(1))
    lines = report([with_shares(row, max(peaks)) for row in rows], args.repeats, peaks,
                   (load_before, os.getloadavg()[0]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decayed_product.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
