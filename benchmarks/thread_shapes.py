"""The CPU causal product on one thread against several, over shapes with few and many heads.

    python -m benchmarks.thread_shapes [--threads 2]

For each (B, H, N) with C=M=64, fp32, q and k elu+1 feature maps: the median forward and
forward+backward time on one thread and on `--threads` threads, the two counts taking turns call
by call (41 rounds for small shapes, 9 for large, after a warm-up call each). Shapes with fewer
heads (B*H) than threads run the op's segment split; the rest one head per work item.
Writes benchmarks/results/thread_shapes.md (or --out DIR).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lintf.ops import causal_linear_attention

from benchmarks.measure import positive_int, seconds_per_thread_count

RESULTS = Path(__file__).parent / "results"
SHAPES = [(1, 1, 256), (1, 1, 1024), (1, 1, 4096), (1, 1, 65536), (1, 2, 2048), (1, 3, 4096), (1, 8, 100),
          (2, 8, 512), (4, 8, 1024), (1, 8, 16384)]


def calls(b: int, h: int, n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    q, k = ((F.elu(torch.randn(b, h, n, 64)) + 1).requires_grad_() for _ in range(2))
    v = torch.randn(b, h, n, 64, requires_grad=True)
    grad = torch.randn(b, h, n, 64)

    def forward() -> None:
        with torch.no_grad():
            causal_linear_attention(q, k, v)

    def forward_backward() -> None:
        torch.autograd.grad(causal_linear_attention(q, k, v), (q, k, v), grad)

    return forward, forward_backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=positive_int, default=2, help="the thread count compared with one")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for thread_shapes.md")
    args = parser.parse_args()
    counts = (1, args.threads)
    torch.manual_seed(0)
    lines = ["# Thread scaling over shapes", "", f"`python -m benchmarks.thread_shapes --threads {args.threads}`", "",
             f"| B | H | N | fwd ms (1 / {args.threads} thr) | fwd speedup | fwd+bwd ms (1 / {args.threads} thr) "
             "| fwd+bwd speedup |", "|---|---|---|---|---|---|---|"]
    for b, h, n in SHAPES:
        rounds = 9 if b * h * n >= 65536 else 41
        forward, forward_backward = calls(b, h, n)
        fwd, both = ({t: 1e3 * s for t, s in seconds_per_thread_count(fn, list(counts), rounds).items()}
                     for fn in (forward, forward_backward))
        lines.append(f"| {b} | {h} | {n} | {fwd[1]:.3f} / {fwd[args.threads]:.3f} | {fwd[1] / fwd[args.threads]:.2f}x "
                     f"| {both[1]:.3f} / {both[args.threads]:.3f} | {both[1] / both[args.threads]:.2f}x |")
        print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "thread_shapes.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
