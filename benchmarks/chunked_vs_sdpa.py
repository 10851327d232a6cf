"""Causal attention forward+backward: lintf's chunked linear path vs softmax SDPA (is_causal).

Prints one table measured in this run (B=1, H=8, D=M=64, fp32, default threads): time of the
pure-PyTorch chunked causal linear attention (``lintf.ops.causal.chunked``, elu features) and of
``scaled_dot_product_attention(is_causal=True)``, their ratio, and each one's peak extra
resident memory, every measurement in a fresh process. Writes the table to
benchmarks/results/chunked_vs_sdpa.md.

    python -m benchmarks.chunked_vs_sdpa [--lengths 1024 4096 16384] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

from benchmarks.measure import median_seconds, peak_resident_mb, resident_mb, run_isolated


def measure_one(method: str, length: int, threads: int) -> dict[str, float]:
    """Time and peak extra memory of one causal forward+backward (run inside a fresh process)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    from lintf.ops.causal.chunked import causal_linear_attention_pytorch

    def chunked_linear(q, k, v):
        return causal_linear_attention_pytorch(F.elu(q) + 1, F.elu(k) + 1, v)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    attend = {"chunked": chunked_linear, "sdpa": sdpa}[method]
    torch.manual_seed(0)

    def make_step(n: int):
        q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
        upstream = torch.randn(1, 8, n, 64)

        def forward_backward():
            attend(q, k, v).backward(upstream)
            q.grad = k.grad = v.grad = None

        return forward_backward

    make_step(128)()  # initialise thread pools and kernels before the memory baseline
    forward_backward = make_step(length)
    baseline = resident_mb()
    repeats = 1 if (method == "sdpa" and length >= 8192) else 3
    seconds = median_seconds(forward_backward, repeats=repeats, warmup=1)
    return {"seconds": seconds, "extra_mb": peak_resident_mb() - baseline, "threads": torch.get_num_threads()}


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| N | chunked fwd+bwd (s) | SDPA fwd+bwd (s) | SDPA / chunked | chunked peak extra (MiB) | SDPA peak extra (MiB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['N']} | {row['chunked']['seconds']:.4f} | {row['sdpa']['seconds']:.4f} | "
            f"{row['sdpa']['seconds'] / row['chunked']['seconds']:.1f}x | "
            f"{row['chunked']['extra_mb']:.0f} | {row['sdpa']['extra_mb']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--single", nargs=3, metavar=("METHOD", "N", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        print(json.dumps(measure_one(args.single[0], int(args.single[1]), int(args.single[2]))))
        return
    sections = ["# Causal forward+backward: chunked linear attention vs softmax SDPA",
                "B=1, H=8, D=M=64, fp32, elu feature map; produced by `python -m benchmarks.chunked_vs_sdpa` "
                "(one run; each cell a fresh process)."]
    for threads in args.threads:
        rows = []
        for length in args.lengths:
            row = {"N": length}
            for method in ("chunked", "sdpa"):
                row[method] = run_isolated("benchmarks.chunked_vs_sdpa", "--single", method, str(length), str(threads))
                if "error" in row[method]:
                    raise SystemExit(f"{method} at N={length} failed: {row[method]['error']}")
            rows.append(row)
            print(f"{threads} threads, N={length}: chunked {row['chunked']}, sdpa {row['sdpa']}", flush=True)
        sections += [f"## {threads} thread(s)", markdown_table(rows)]
    report = "\n\n".join(sections)
    print(report)
    out = HERE / "results" / "chunked_vs_sdpa.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(report + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
