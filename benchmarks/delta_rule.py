"""Delta rule and GLA benchmark on the CPU: the compiled ops against their PyTorch chunked paths and FLA's references.

    python -m benchmarks.delta_rule [--lengths 1024 4096 16384] [--dims 64 128] [--threads 1 2] [--repeats 3]
        [--implementations compiled pytorch ...] [--split-repeats 7]

B=1, H=8, C=M (``--dims``), fp32. The delta rule (``lintf.ops.delta_rule``: q, k L2-normalised,
beta = sigmoid of a normal draw, no decay) and GLA (``lintf.ops.gated_linear_attention``: log-gates
log sigmoid(x)/16 with x normal, GLA's temperature) each run: compiled (the C++ op, where it is
built), pytorch (the chunked path: LINTF_EXTENSION=off), and, when ``fla`` is importable
(``pip install -e ".[bench]"``), FLA's own PyTorch references on the CPU: ``delta_rule_chunkwise``
and ``delta_rule_recurrence`` (``fla.ops.delta_rule.naive``), ``naive_recurrent_gla``
(``fla.ops.gla.naive``). FLA's references run up to ``--reference-max`` positions, and the
step-by-step ones, which keep a state per position for autograd (N C M floats per head), up to
``--recurrent-max``. The causal product's compiled forward at the same shape is the yardstick of
the delta rule's forward.

Per implementation: fwd ms (no gradients), fwd+bwd ms (gradients of q, k, v and beta or the gates),
median of ``--repeats`` calls after a warm-up call (one call when the warm-up took over
``--slow-seconds``), and MB, the peak extra resident memory of one fwd+bwd call over its inputs.
``--implementations`` keeps only the named ones (e.g. ``compiled``: the C++ ops and the causal product).
The compiled delta rule's backward is reported against its forward as (fwd+bwd - fwd) / fwd, and, with
``--split-repeats`` > 0, from the op's own forward and backward calls (``torch.ops.lintf.delta_rule`` and
``delta_rule_backward``) alternated in one loop, timed in the calling thread's CPU time (one thread: on a
machine shared with other work, wall time counts the time other processes hold the core), medians.
Writes benchmarks/results/delta_rule.md and .json.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lintf.ops import causal_dot_product, cpu_vector_path, delta_rule, gated_linear_attention
from lintf.ops.common.tuning import cpu_model, cpu_tuning, tuning_lines
from lintf.ops.delta import compiled as delta_compiled
from lintf.ops.gla import compiled as gla_compiled

from benchmarks.causal_product import matmul_gflops
from benchmarks.measure import (environment_variable, median_seconds, peak_extra_mb, positive_int,
                                release_freed_memory_eagerly, write_report)

HEADS = 8
CPU = torch.device("cpu")
RESULTS = Path(__file__).parent / "results"
Op = Callable[[list[torch.Tensor]], torch.Tensor]


def delta_inputs(n: int, dim: int) -> list[torch.Tensor]:
    """q, k (1, H, N, C) unit rows, v (1, H, N, M), beta (1, H, N) in (0, 1)."""
    q, k = (F.normalize(torch.randn(1, HEADS, n, dim), dim=-1) for _ in range(2))
    return [q, k, torch.randn(1, HEADS, n, dim), torch.sigmoid(torch.randn(1, HEADS, n))]


def gla_inputs(n: int, dim: int) -> list[torch.Tensor]:
    """q, k, v (1, H, N, C) and log-gates (1, H, N, C) log sigmoid(x) / 16."""
    q, k, v = (torch.randn(1, HEADS, n, dim) for _ in range(3))
    return [q, k, v, F.logsigmoid(torch.randn(1, HEADS, n, dim)) / 16]


def fla_references() -> dict[str, tuple[str, Op]]:
    """FLA's CPU references by name: (op, function of our tensors); empty without ``fla``."""
    if importlib.util.find_spec("fla") is None:
        return {}
    from fla.ops.delta_rule.naive import delta_rule_chunkwise, delta_rule_recurrence
    from fla.ops.gla.naive import naive_recurrent_gla

    def gla(t: list[torch.Tensor]) -> torch.Tensor:  # FLA's GLA reference takes (B, N, H, C)
        return naive_recurrent_gla(*(x.transpose(1, 2) for x in t))[0].transpose(1, 2)

    return {
        "fla chunkwise": ("delta rule", lambda t: delta_rule_chunkwise(*t)[0]),
        "fla recurrent": ("delta rule", lambda t: delta_rule_recurrence(*t)[0]),
        "fla recurrent gla": ("gla", gla),
    }


def implementations(only: list[str] | None = None) -> list[tuple[str, str, Op, str | None]]:
    """(op, name, function, LINTF_EXTENSION value) of everything measured (only the names in ``only``, if given)."""
    ops = [("delta rule", lambda t: delta_rule(*t), delta_compiled),
           ("gla", lambda t: gated_linear_attention(*t), gla_compiled)]
    rows = [(op, "compiled", fn, None) for op, fn, compiled in ops if compiled.serves(CPU)]
    rows += [(op, "pytorch", fn, "off") for op, fn, _ in ops]
    rows += [(op, name, fn, None) for name, (op, fn) in fla_references().items()]
    rows += [("causal product", "compiled", lambda t: causal_dot_product(*t[:3]), None)]
    return [row for row in rows if only is None or row[1] in only]


def call(fn: Op, tensors: list[torch.Tensor], backward: bool) -> Callable[[], None]:
    """One forward (and backward, for the tensors that require gradients) of fn."""
    upstream = torch.randn_like(tensors[2])

    def run() -> None:
        out = fn(tensors)
        if backward:
            out.backward(upstream)
            for tensor in tensors:
                tensor.grad = None

    return run


def measure(
    fn: Op, extension: str | None, tensors: list[torch.Tensor], repeats: int, slow_seconds: float
) -> dict[str, float]:
    """fwd and fwd+bwd milliseconds and fwd+bwd peak extra MB of fn on tensors."""
    with environment_variable("LINTF_EXTENSION", extension):
        with torch.no_grad():
            forward = median_seconds(call(fn, tensors, False), repeats, slow_seconds=slow_seconds)
        leaves = [t.detach().requires_grad_() for t in tensors]
        both = median_seconds(call(fn, leaves, True), repeats, slow_seconds=slow_seconds)
        memory = peak_extra_mb(call(fn, leaves, True))
    return {"fwd": 1e3 * forward, "fwd+bwd": 1e3 * both, "MB": memory}


Row = dict[str, object]


def run_benchmark(lengths: list[int], dims: list[int], threads: list[int], args: argparse.Namespace) -> list[Row]:
    """Every implementation at every C = M, thread count and length; FLA's references up to their maximum N."""
    rows: list[Row] = []
    for dim in dims:
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            for n in lengths:
                inputs = {"delta rule": delta_inputs(n, dim), "gla": gla_inputs(n, dim)}
                inputs["causal product"] = inputs["delta rule"]
                for op, name, fn, extension in implementations(args.implementations):
                    if name.startswith("fla") and n > args.reference_max:
                        continue
                    if "recurrent" in name and n > args.recurrent_max:
                        continue
                    result = measure(fn, extension, inputs[op], args.repeats, args.slow_seconds)
                    rows.append({"op": op, "implementation": name, "C=M": dim, "threads": n_threads, "N": n, **result})
                    print(rows[-1], flush=True)
    return rows


def split_ratio(n: int, dim: int, repeats: int) -> Row:
    """CPU ms of the compiled delta rule's forward and backward calls, alternated, medians, and their ratio."""
    q, k, v, beta = delta_inputs(n, dim)
    grad = torch.randn_like(v)
    calls = {"fwd": lambda: torch.ops.lintf.delta_rule(q, k, v, beta, None, dim**-0.5, None),
             "bwd": lambda: torch.ops.lintf.delta_rule_backward(grad, q, k, v, beta, None, dim**-0.5, None, None)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for step in range(repeats + 1):  # the first round warms up
        for name, fn in calls.items():
            start = time.thread_time()
            fn()
            if step > 0:
                times[name].append(1e3 * (time.thread_time() - start))
    fwd, bwd = (statistics.median(times[name]) for name in calls)
    ratios = sorted(b / f for b, f in zip(times["bwd"], times["fwd"]))
    return {"C=M": dim, "N": n, "fwd": fwd, "bwd": bwd, "ratio": bwd / fwd, "low": ratios[0], "high": ratios[-1]}


def split_lines(splits: list[Row], repeats: int) -> list[str]:
    if not splits:
        return []
    title = (f"Compiled delta rule, 1 thread, the op's forward and backward calls alternated {repeats} times, "
             "CPU time of the calling thread, medians:")
    lines = ["", title, "",
             "| C=M | N | fwd ms | bwd ms | bwd / fwd | lowest, highest pairwise |", "|---|---|---|---|---|---|"]
    for r in splits:
        lines.append(f"| {r['C=M']} | {r['N']} | {r['fwd']:.1f} | {r['bwd']:.1f} | {r['ratio']:.2f}x "
                     f"| {r['low']:.2f}, {r['high']:.2f} |")
    return lines


def find(rows: list[Row], **match: object) -> Row | None:
    return next((r for r in rows if all(r[key] == value for key, value in match.items())), None)


def targets(rows: list[Row]) -> list[str]:
    """The ratios the compiled delta rule aims at, at the longest length measured, per C = M and thread count."""
    lines = []
    for row in rows:
        if (row["op"], row["implementation"]) != ("delta rule", "compiled") or row["N"] != max(r["N"] for r in rows):
            continue
        shape = {key: row[key] for key in ("C=M", "threads", "N")}
        pytorch = find(rows, op="delta rule", implementation="pytorch", **shape)
        causal = find(rows, op="causal product", **shape)
        backward = (row["fwd+bwd"] - row["fwd"]) / row["fwd"]
        parts = [f"compiled delta rule backward / forward {backward:.2f}x (target <= 3x at C=M=128)"]
        if pytorch is not None:
            parts.append(f"pytorch / compiled fwd+bwd {pytorch['fwd+bwd'] / row['fwd+bwd']:.1f}x (target >= 5x)")
        if causal is not None:
            parts.append(f"compiled delta rule fwd / causal product fwd {row['fwd'] / causal['fwd']:.1f}x (target <= 3x)")
        lines.append(f"- C=M={row['C=M']}, {row['threads']} thread(s), N={row['N']}: " + "; ".join(parts))
    return lines


def cpu_lines(dims: list[int]) -> list[str]:
    """The CPU, its caches, vector units and the compiled ops' choices at each C = M (``lintf.ops.common.tuning``)."""
    lines = []
    for dim in dims:
        report = cpu_tuning(dim, dim, torch.float32)
        if report is not None:
            described = tuning_lines(report)
            lines += described[2:] if lines else described
    return lines


def report(
    rows: list[Row], splits: list[Row], command: str, args: argparse.Namespace, load: tuple[float, float],
    peaks: tuple[float, float],
) -> list[str]:
    lines = [
        "# Delta rule and GLA benchmark (CPU)",
        "",
        f"`{command}`",
        "",
        f"torch {torch.__version__}; CPU: {cpu_model()}; vector path of the compiled ops: {cpu_vector_path()}.",
        f"B=1, H={HEADS}, fp32; median of {args.repeats} calls after a warm-up call (one call after a warm-up over "
        f"{args.slow_seconds:g} s). compiled: the C++ op; pytorch: the",
        "chunked PyTorch path (LINTF_EXTENSION=off); fla: flash-linear-attention's PyTorch references on the CPU.",
        "MB: peak extra resident memory of one fwd+bwd call. Every row ran in this one process, one after another.",
        f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores.",
        (f"fp32 matmul (2048^2, 1 thread, fastest of 7 calls) before / after the timings: {peaks[0]:.1f} / "
         f"{peaks[1]:.1f} GFLOP/s."),
        "",
        *cpu_lines(args.dims),
        "",
        *targets(rows),
        *split_lines(splits, args.split_repeats),
        "",
        "| op | implementation | C=M | threads | N | fwd ms | fwd+bwd ms | MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['op']} | {r['implementation']} | {r['C=M']} | {r['threads']} | {r['N']} | {r['fwd']:.1f} "
                     f"| {r['fwd+bwd']:.1f} | {r['MB']:.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--dims", type=positive_int, nargs="+", default=[64, 128])
    parser.add_argument("--threads", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--reference-max", type=positive_int, default=4096, help="longest N of FLA's references")
    parser.add_argument("--recurrent-max", type=positive_int, default=1024,
                        help="longest N of FLA's step-by-step references")
    parser.add_argument("--slow-seconds", type=float, default=2.0,
                        help="time one call instead of the median of --repeats when the warm-up took longer")
    parser.add_argument("--implementations", nargs="+", default=None,
                        help="measure only these (compiled, pytorch, fla chunkwise, ...); default: all")
    parser.add_argument("--split-repeats", type=int, default=7,
                        help="rounds of the compiled delta rule's forward / backward split at the longest N (0: none)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    release_freed_memory_eagerly()
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    peak_before = matmul_gflops(1)
    rows = run_benchmark(args.lengths, args.dims, args.threads, args)
    splits = []
    if args.split_repeats > 0 and delta_compiled.serves(CPU):
        torch.set_num_threads(1)
        splits = [split_ratio(max(args.lengths), dim, args.split_repeats) for dim in args.dims]
        print(splits, flush=True)
    command = " ".join(["python -m benchmarks.delta_rule", *sys.argv[1:]])
    peaks = (peak_before, matmul_gflops(1))
    lines = report(rows, splits, command, args, (load_before, os.getloadavg()[0]), peaks)
    write_report(args.out, "delta_rule", lines, {"rows": rows, "split": splits, "matmul_gflops": peaks})


if __name__ == "__main__":
    main()
