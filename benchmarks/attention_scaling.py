"""The paper's Figure 1: attention forward+backward time and memory per sample against length.

    python -m benchmarks.attention_scaling [--exponents 9 10 11 12 13 14] [--tokens 16384]

Every registered causal attention except reformer runs with its defaults, and reformer with 1,
4 and 8 hashing rounds; attentions with ``supports_causal = False`` are skipped, saying so. For N = 2^9 .. 2^14 the batch is tokens / N (the paper kept B*N fixed); each
cell is one causal forward+backward of the attention alone (B, H=4, N, D=M=32, fp32) and
reports time per sample and peak extra resident memory per sample. Softmax runs while its
estimated time fits --budget-seconds. Writes benchmarks/results/attention_scaling.{md,json,png}
and prints time(2N)/time(N) for linear attention (2.0 for a cost linear in N).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import lintf

HERE = Path(__file__).resolve().parent
from benchmarks.measure import median_seconds, peak_extra_mb, release_freed_memory_eagerly
from lintf.registry import ATTENTIONS

HEADS, DIM = 4, 32


def variants() -> dict[str, tuple[str, dict]]:
    """Display name -> (registry name, kwargs) of the causal attentions; prints the names skipped."""
    causal = [name for name in lintf.list_attentions() if ATTENTIONS.get(name).supports_causal]
    skipped = sorted(set(lintf.list_attentions()) - set(causal))
    if skipped:
        print(f"skipped (non-causal only, supports_causal = False): {', '.join(skipped)}", flush=True)
    chosen = {name: (name, {}) for name in causal if name != "reformer"}
    for rounds in (1, 4, 8):
        chosen[f"reformer-{rounds}"] = ("reformer", {"n_hashes": rounds})
    return chosen


def measure_cell(name: str, kwargs: dict, batch: int, length: int) -> dict[str, float]:
    attention = lintf.build_attention(name, head_dim=DIM, **kwargs)
    q, k, v = (torch.randn(batch, HEADS, length, DIM, requires_grad=True) for _ in range(3))
    upstream = torch.randn(batch, HEADS, length, DIM)

    def forward_backward() -> None:
        attention(q, k, v, causal=True).backward(upstream)
        q.grad = k.grad = v.grad = None

    forward_backward()  # warm-up
    memory = peak_extra_mb(forward_backward)
    seconds = median_seconds(forward_backward, repeats=3 if length <= 4096 else 1, warmup=0)
    return {"ms_per_sample": 1e3 * seconds / batch, "mb_per_sample": memory / batch}


def run(exponents: list[int], tokens: int, budget: float) -> dict[str, dict[int, dict]]:
    results: dict[str, dict[int, dict]] = {}
    for display, (name, kwargs) in variants().items():
        results[display] = {}
        for exponent in exponents:
            length = 2**exponent
            batch = max(1, tokens // length)
            previous = results[display].get(length // 2)
            if name == "softmax" and previous and 4 * previous["ms_per_sample"] * batch / 1e3 > budget:
                print(f"{display:12s} N={length:6d}: skipped (estimated beyond {budget:.0f} s)", flush=True)
                continue
            results[display][length] = measure_cell(name, kwargs, batch, length)
            cell = results[display][length]
            print(f"{display:12s} N={length:6d} B={batch:3d}: {cell['ms_per_sample']:9.2f} ms/sample "
                  f"{cell['mb_per_sample']:8.1f} MiB/sample", flush=True)
    return results


def markdown(results: dict[str, dict[int, dict]], lengths: list[int], key: str, unit: str) -> str:
    lines = ["| attention | " + " | ".join(f"N={n}" for n in lengths) + " |", "|---|" + "---:|" * len(lengths)]
    for display, cells in results.items():
        values = [f"{cells[n][key]:.2f}" if n in cells else "-" for n in lengths]
        lines.append(f"| {display} | " + " | ".join(values) + " |")
    return f"{unit}\n\n" + "\n".join(lines)


def plot(results: dict[str, dict[int, dict]], threads: int, path: Path) -> None:
    """Time and memory per sample against N, one line (colour and marker) per attention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plot_style import legend_beside, save, series_style

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for index, (display, cells) in enumerate(results.items()):
        lengths = sorted(cells)
        style = {"label": display, "markersize": 6, **series_style(index)}
        axes[0].loglog(lengths, [cells[n]["ms_per_sample"] for n in lengths], **style)
        axes[1].loglog(lengths, [max(cells[n]["mb_per_sample"], 1e-3) for n in lengths], **style)
    for axis, label in zip(axes, ("time per sample (ms)", "peak extra memory per sample (MiB)")):
        axis.set_xlabel("sequence length N")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    legend_beside(figure, axes, title="attention")
    figure.suptitle(f"causal attention forward+backward, H={HEADS}, D={DIM}, {threads} threads")
    save(figure, path)
    plt.close(figure)


def replot(path: Path) -> None:
    """Redraw the PNG beside ``path`` (attention_scaling.json) from its numbers."""
    saved = json.loads(path.read_text())
    results = {name: {int(n): cell for n, cell in cells.items()} for name, cells in saved["results"].items()}
    plot(results, saved["threads"], path.with_suffix(".png"))


def main() -> None:
    release_freed_memory_eagerly()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exponents", type=int, nargs="+", default=[9, 10, 11, 12, 13, 14])
    parser.add_argument("--tokens", type=int, default=16384, help="B * N per cell")
    parser.add_argument("--budget-seconds", type=float, default=60.0, help="skip softmax cells estimated slower")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from results/attention_scaling.json, "
                        "without measuring")
    args = parser.parse_args()
    if args.replot:
        replot(HERE / "results" / "attention_scaling.json")
        return
    torch.manual_seed(0)
    results = run(args.exponents, args.tokens, args.budget_seconds)
    lengths = [2**e for e in args.exponents]
    linear = results["linear"]
    ratios = [linear[2 * n]["ms_per_sample"] / linear[n]["ms_per_sample"] for n in lengths[:-1] if 2 * n in linear]
    ratio_text = ", ".join(f"{n}->{2 * n}: {r:.2f}" for n, r in zip(lengths, ratios))
    report = "\n\n".join([
        "# Attention scaling (paper Figure 1)",
        f"Causal forward+backward of the attention alone, H={HEADS}, D=M={DIM}, fp32, B = {args.tokens} / N, "
        f"{torch.get_num_threads()} threads; produced by `python -m benchmarks.attention_scaling` in one run.",
        markdown(results, lengths, "ms_per_sample", "Time per sample (ms):"),
        markdown(results, lengths, "mb_per_sample", "Peak extra memory per sample (MiB):"),
        f"linear time(2N)/time(N): {ratio_text}",
    ])
    print(report)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "attention_scaling.md").write_text(report + "\n")
    saved = {"threads": torch.get_num_threads(), "results": results}
    (HERE / "results" / "attention_scaling.json").write_text(json.dumps(saved, indent=1) + "\n")
    plot(results, torch.get_num_threads(), HERE / "results" / "attention_scaling.png")


if __name__ == "__main__":
    main()
