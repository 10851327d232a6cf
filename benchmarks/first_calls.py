"""The first calls of the CPU causal product in a fresh process, one thread against several.

    python -m benchmarks.first_calls [--n 16384] [--calls 14] [--threads 1 2]

A median over warmed-up calls hides what a short run or a fresh process sees: outputs of many MB
are fresh memory each call, and the kernel's page faults, taken by several threads at once, can
cost more than the arithmetic. For each thread count a new Python process (the op loaded, nothing
else run) times its first `calls` forward calls and then `calls` forward+backward calls, B=1,
H=8, C=M=64, fp32, printing each call's wall time and the process's system (kernel) time during it.
Writes benchmarks/results/first_calls.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.measure import module_environment, positive_int

RESULTS = Path(__file__).parent / "results"


def child(n: int, calls: int, threads: int) -> None:
    """Runs in the fresh process: prints {"fwd": [[wall ms, sys ms], ...], "fwd+bwd": [...]}."""
    import torch
    import torch.nn.functional as F

    from lintf.ops import causal_linear_attention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q, k = ((F.elu(torch.randn(1, 8, n, 64)) + 1).requires_grad_() for _ in range(2))
    v = torch.randn(1, 8, n, 64, requires_grad=True)
    grad = torch.randn(1, 8, n, 64)

    def forward() -> None:
        with torch.no_grad():
            causal_linear_attention(q, k, v)

    def forward_backward() -> None:
        torch.autograd.grad(causal_linear_attention(q, k, v), (q, k, v), grad)

    timings: dict[str, list[list[float]]] = {}
    for mode, fn in (("fwd", forward), ("fwd+bwd", forward_backward)):
        timings[mode] = []
        for _ in range(calls):
            system = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            start = time.perf_counter()
            fn()
            wall = time.perf_counter() - start
            system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - system
            timings[mode].append([wall * 1e3, system * 1e3])
    print(json.dumps(timings))


def report(n: int, calls: int, runs: dict[int, dict[str, list[list[float]]]]) -> str:
    lines = [
        "# First calls in a fresh process",
        "",
        f"`python -m benchmarks.first_calls --n {n} --calls {calls} --threads {' '.join(map(str, runs))}`",
        "",
        "Each call's wall ms / system ms (kernel time of the whole process during the call); "
        "the forward calls come first, then the forward+backward calls, in the same process.",
        "",
    ]
    for mode in ("fwd", "fwd+bwd"):
        lines += [f"## {mode}", "", "| call | " + " | ".join(f"{t} thread(s)" for t in runs) + " |",
                  "|---|" + "---|" * len(runs)]
        for call in range(calls):
            cells = [f"{runs[t][mode][call][0]:.1f} / {runs[t][mode][call][1]:.0f}" for t in runs]
            lines.append(f"| {call + 1} | " + " | ".join(cells) + " |")
        medians = [statistics.median(wall for wall, _ in runs[t][mode]) for t in runs]
        lines += ["| median | " + " | ".join(f"{m:.1f}" for m in medians) + " |", ""]
        slowest = {t: max(wall for wall, _ in runs[t][mode]) for t in runs}
        lines.append(f"Slowest {mode} call: " + ", ".join(f"{slowest[t]:.1f} ms on {t} thread(s)" for t in runs))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=positive_int, default=16384, help="sequence length")
    parser.add_argument("--calls", type=positive_int, default=14, help="calls timed per mode")
    parser.add_argument("--threads", type=positive_int, nargs="+", default=[1, 2], help="thread counts, one process each")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for first_calls.md")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.n, args.calls, args.child)
        return
    runs = {}
    for threads in args.threads:
        command = [sys.executable, "-m", "benchmarks.first_calls", "--n", str(args.n), "--calls", str(args.calls),
                   "--child", str(threads)]
        done = subprocess.run(command, env=module_environment(), capture_output=True, text=True, check=True)
        runs[threads] = json.loads(done.stdout.strip().splitlines()[-1])
    text = report(args.n, args.calls, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_calls.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
