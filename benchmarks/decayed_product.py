"""Decayed causal product benchmark: the compiled CPU op against the pure-PyTorch chunked path.

    python -m benchmarks.decayed_product [--lengths 1024 4096 16384] [--repeats 5]

Both through ``lintf.ops.decayed_dot_product``; the PyTorch path is the one it takes with
LINTF_EXTENSION=off (chunks of 64). B=1, H=8, C=M=64, fp32 q, k, v, log_decay uniform in
[-0.1, 0] (data-dependent decays like gated linear attention's, so the backward computes the
gradient of log_decay too). One thread (torch.set_num_threads(1)), median of 5 calls after one
warm-up call; "fwd" without gradients, "fwd+bwd" with gradients for q, k, v and log_decay. The
ratio is the PyTorch time over the compiled one. Memory: peak extra resident MB of one fwd+bwd
call over its inputs (outputs and gradients included). Writes benchmarks/results/decayed_product.md.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import torch

from lintf.ops import cpu_vector_path, decayed_dot_product
from lintf.ops.decayed.compiled import serves

from benchmarks.causal_product import cpu_model
from benchmarks.measure import environment_variable, median_seconds, peak_extra_mb, release_freed_memory_eagerly

HEADS, DIM = 8, 64
RESULTS = Path(__file__).parent / "results"


def inputs(n: int, requires_grad: bool) -> list[torch.Tensor]:
    """q, k (1, H, N, C), v (1, H, N, M), log_decay (1, H, N)."""
    q, k, v = (torch.randn(1, HEADS, n, DIM) for _ in range(3))
    log_decay = -0.1 * torch.rand(1, HEADS, n)
    return [t.requires_grad_(requires_grad) for t in (q, k, v, log_decay)]


def call(tensors: list[torch.Tensor], backward: bool) -> Callable[[], None]:
    """One forward (and backward) of the decayed product on tensors."""
    upstream = torch.randn_like(tensors[2])

    def run() -> None:
        out = decayed_dot_product(*tensors)
        if backward:
            out.backward(upstream)
            for tensor in tensors:
                tensor.grad = None

    return run


def measure(n: int, path: str | None, repeats: int) -> dict[str, float]:
    """Forward and fwd+bwd milliseconds and fwd+bwd peak MB on one path (None: compiled, "off": PyTorch)."""
    with environment_variable("LINTF_EXTENSION", path):
        with torch.no_grad():
            forward = median_seconds(call(inputs(n, False), False), repeats)
        tensors = inputs(n, True)
        both = median_seconds(call(tensors, True), repeats)
        memory = peak_extra_mb(call(tensors, True))
    return {"fwd": 1e3 * forward, "fwd+bwd": 1e3 * both, "MB": memory}


Row = tuple[int, dict[str, float], dict[str, float]]  # N, compiled, PyTorch


def report(rows: list[Row], repeats: int, load: tuple[float, float]) -> list[str]:
    lines = [
        "# Decayed causal product benchmark",
        "",
        "`python -m benchmarks.decayed_product`",
        "",
        f"torch {torch.__version__}; CPU: {cpu_model()}; vector path of the op: {cpu_vector_path()}; 1 thread.",
        f"B=1, H={HEADS}, C=M={DIM}, fp32, log_decay in [-0.1, 0]; median of {repeats} calls after a warm-up call.",
        "Both columns go through `decayed_dot_product`: the compiled CPU op (chunks of 32, constant-memory",
        "backward) and the PyTorch chunked path (LINTF_EXTENSION=off, chunks of 64, autograd backward).",
        "Ratio: PyTorch time / compiled time. MB: peak extra resident memory of one fwd+bwd call.",
        f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores; both paths",
        "ran in this one process, so the ratios compare like with like even when other work shares the machine.",
        "",
        "| N | compiled fwd ms | pytorch fwd ms | fwd ratio | compiled fwd+bwd ms | pytorch fwd+bwd ms "
        "| fwd+bwd ratio | compiled MB | pytorch MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, op, py in rows:
        lines.append(
            f"| {n} | {op['fwd']:.1f} | {py['fwd']:.1f} | {py['fwd'] / op['fwd']:.1f}x | {op['fwd+bwd']:.1f} "
            f"| {py['fwd+bwd']:.1f} | {py['fwd+bwd'] / op['fwd+bwd']:.1f}x | {op['MB']:.0f} | {py['MB']:.0f} |"
        )
    return lines


def main() -> None:
    release_freed_memory_eagerly()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if not serves(torch.device("cpu")):
        raise SystemExit("the compiled decayed product is not available (see the build warnings)")
    load_before = os.getloadavg()[0]
    rows = [(n, measure(n, None, args.repeats), measure(n, "off", args.repeats)) for n in args.lengths]
    lines = report(rows, args.repeats, (load_before, os.getloadavg()[0]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decayed_product.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
