"""The paper's Table 1: image generation throughput and memory, linear RNN vs softmax vs reformer.

    python -m benchmarks.generation_throughput [--pixels 784 3072] [--memory-budget-mb 2048]

One architecture with random weights (8 layers, 8 heads, d_model 256, d_ff 1024, a 256-way
byte head) generates whole images byte by byte, for:
  linear            the recurrent step: O(1) state per layer
  softmax-recompute the full causal forward over the prefix at every step (the paper's baseline)
  softmax-kv-cache  step with a KV cache
  reformer-1/-4     step with a cache of keys, values and buckets (1 and 4 hashing rounds)
Each method gets the largest batch whose peak memory fits the budget (per-image memory is
measured on one image generated to the end, then scaled; capped by --max-batch). Memory is
profiled in a child process that returns freed memory to the kernel at once (see measure.py);
throughput is timed here, under the default allocator a user runs with. Throughput
is images per second at that batch. softmax-recompute costs O(N^2) per image; when a full run
exceeds --step-budget-seconds it is timed at evenly spaced positions and the per-step times
are integrated over all positions (the table says so). Also plots peak memory against the
position reached (flat for linear). Writes generation_throughput.{md,json,png} to --out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import lintf
from lintf.models import EncoderConfig, TransformerEncoder

HERE = Path(__file__).resolve().parent
from benchmarks.measure import peak_extra_mb, run_isolated

METHODS = {
    "linear": ("linear", {}, "step"),
    "softmax-recompute": ("softmax", {}, "recompute"),
    "softmax-kv-cache": ("softmax", {}, "step"),
    "reformer-1": ("reformer", {"n_hashes": 1}, "step"),
    "reformer-4": ("reformer", {"n_hashes": 4}, "step"),
}


class ByteModel(nn.Module):
    """Byte embedding + positions -> TransformerEncoder -> 256-way head (random weights)."""

    def __init__(self, attention: str, attention_kwargs: dict, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, 256)
        self.positions = nn.Parameter(0.02 * torch.randn(length, 256))
        self.encoder = TransformerEncoder(EncoderConfig(256, 8, 8, attention, attention_kwargs, d_ff=1024, dropout=0.0))
        self.head = lintf.build_head("categorical", 256)

    def sample_step(self, pixels: torch.Tensor, t: int, state: list) -> tuple[torch.Tensor, list]:
        hidden, state = self.encoder.step(self.embed(pixels) + self.positions[t], state)
        return self.head.sample(self.head(hidden)), state

    def sample_recompute(self, prefix: torch.Tensor) -> torch.Tensor:
        x = self.embed(prefix) + self.positions[: prefix.shape[1]]  # (B, t, d_model)
        return self.head.sample(self.head(self.encoder(x, causal=True)[:, -1]))


def generate(model: ByteModel, mode: str, batch: int, length: int, positions: list[int] | None = None):
    """Generate ``length`` bytes per image; returns per-step seconds (timed positions only if given)."""
    pixels = torch.zeros(batch, dtype=torch.long)
    step_seconds: dict[int, float] = {}
    if mode == "step":
        state = model.encoder.init_state(batch)
        for t in range(length):
            start = time.perf_counter()
            pixels, state = model.sample_step(pixels, t, state)
            step_seconds[t] = time.perf_counter() - start
        return step_seconds
    prefix = torch.zeros(batch, 1, dtype=torch.long)
    for t in positions or range(length):
        if prefix.shape[1] < t + 1:  # jump ahead: a random prefix costs the same as a sampled one
            prefix = torch.randint(0, 256, (batch, t + 1))
        start = time.perf_counter()
        new = model.sample_recompute(prefix)
        step_seconds[t] = time.perf_counter() - start
        prefix = torch.cat([prefix, new[:, None]], dim=1)
    return step_seconds


def memory_profile(model: ByteModel, mode: str, length: int) -> list[tuple[int, float]]:
    """Peak extra MiB for one image generated up to each of 8 positions (a fresh run each)."""
    checkpoints = sorted({max(1, round(length * f / 8)) for f in range(1, 9)})
    generate(model, mode, 1, 2)  # warm-up: first-call allocations are not the method's memory
    if mode == "recompute":
        return [(n, peak_extra_mb(lambda n=n: model.sample_recompute(torch.zeros(1, n, dtype=torch.long))))
                for n in checkpoints]
    return [(n, peak_extra_mb(lambda n=n: generate(model, mode, 1, n))) for n in checkpoints]


def memory_profile_in_child(name: str, length: int) -> list[tuple[int, float]]:
    """Run memory_profile in a child process whose freed memory goes back to the kernel at once."""
    result = run_isolated("benchmarks.generation_throughput", "--memory-profile-of", name, str(length), timeout=None)
    if "error" in result:
        raise RuntimeError(f"memory profile of {name} at {length} px failed: {result['error']}")
    return [tuple(point) for point in result["profile"]]


def throughput(model: ByteModel, mode: str, batch: int, length: int, step_budget: float) -> tuple[float, str]:
    if mode == "step":
        seconds = sum(generate(model, mode, batch, length).values())
        return batch / seconds, "all steps"
    probe = generate(model, mode, batch, length, positions=[length - 1])[length - 1]
    if probe * length / 2 <= step_budget:
        return batch / sum(generate(model, mode, batch, length).values()), "all steps"
    positions = sorted({round(i * (length - 1) / 15) for i in range(16)})
    timed = generate(model, mode, batch, length, positions)
    every_step = np.interp(np.arange(length), positions, [timed[p] for p in positions])  # linear in between
    return batch / float(every_step.sum()), f"timed at {len(positions)} positions, interpolated"


def run_method(name: str, length: int, budget_mb: float, max_batch: int, step_budget: float) -> dict:
    attention, kwargs, mode = METHODS[name]
    torch.manual_seed(0)
    model = ByteModel(attention, kwargs, length).eval()
    profile = memory_profile_in_child(name, length)
    per_image = profile[-1][1]
    batch = max(1, min(max_batch, int(budget_mb // max(per_image, 1e-3))))
    images_per_second, how = throughput(model, mode, batch, length, step_budget)
    return {"batch": batch, "per_image_mb": per_image, "images_per_second": images_per_second, "how": how,
            "profile": profile}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pixels", type=int, nargs="+", default=[784, 3072])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--memory-budget-mb", type=float, default=2048.0)
    parser.add_argument("--max-batch", type=int, nargs="+", default=[256],
                        help="batch cap, one value for all --pixels or one per --pixels entry")
    parser.add_argument("--step-budget-seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=HERE / "results", help="directory of the .md, .json and .png")
    parser.add_argument("--memory-profile-of", nargs=2, metavar=("METHOD", "PIXELS"), help=argparse.SUPPRESS)
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from --out's generation_throughput.json, "
                        "without measuring")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((args.out / "generation_throughput.json").read_text()), args.out / "generation_throughput.png")
        return
    if args.memory_profile_of:  # the child process of memory_profile_in_child
        name, length = args.memory_profile_of[0], int(args.memory_profile_of[1])
        attention, kwargs, mode = METHODS[name]
        with torch.inference_mode():
            print(json.dumps({"profile": memory_profile(ByteModel(attention, kwargs, length).eval(), mode, length)}))
        return
    if len(args.max_batch) not in (1, len(args.pixels)):
        parser.error(f"--max-batch takes 1 or {len(args.pixels)} values (one per --pixels), got {len(args.max_batch)}")
    caps = dict(zip(args.pixels, args.max_batch * len(args.pixels) if len(args.max_batch) == 1 else args.max_batch))
    rows = []
    with torch.inference_mode():
        for length in args.pixels:
            for name in args.methods:
                result = run_method(name, length, args.memory_budget_mb, caps[length], args.step_budget_seconds)
                rows.append({"pixels": length, "method": name, **result})
                print(f"{length:5d} px {name:18s} batch {result['batch']:4d} "
                      f"{result['images_per_second']:10.4f} img/s  {result['per_image_mb']:8.1f} MiB/img ({result['how']})",
                      flush=True)
    report = render(rows, args)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "generation_throughput.md").write_text(report + "\n")
    (args.out / "generation_throughput.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, args.out / "generation_throughput.png")


def render(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# Image generation throughput (paper Table 1)",
        "",
        f"Random-weight 8-layer, 8-head, d_model 256 model; memory budget {args.memory_budget_mb:.0f} MiB, batch cap "
        f"{' / '.join(map(str, args.max_batch))} (per pixel count); {torch.get_num_threads()} threads; `python {' '.join(['-m benchmarks.generation_throughput', *sys.argv[1:]])}`.",
        "",
        "| pixels | method | batch | images/s | peak MiB per image | speed-up vs softmax-recompute | how timed |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        base = next((r for r in rows if r["pixels"] == row["pixels"] and r["method"] == "softmax-recompute"), None)
        speedup = f"{row['images_per_second'] / base['images_per_second']:.0f}x" if base else "-"
        memory = f"{row['per_image_mb']:.1f}" if row["per_image_mb"] >= 0.05 else "<0.1"  # below RSS resolution
        lines.append(f"| {row['pixels']} | {row['method']} | {row['batch']} | {row['images_per_second']:.4f} | "
                     f"{memory} | {speedup} | {row['how']} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Peak memory against the position reached, one line (colour and marker) per method, a panel per image size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plot_style import legend_beside, save, series_style

    lengths = sorted({r["pixels"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    figure, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 4), squeeze=False)
    for axis, length in zip(axes[0], lengths):
        for row in (r for r in rows if r["pixels"] == length):
            positions, memory = zip(*row["profile"])
            axis.plot(positions, memory, label=row["method"], markersize=6, **series_style(methods.index(row["method"])))
        axis.set_title(f"{length}-pixel images, one image")
        axis.set_xlabel("pixel position reached")
        axis.set_ylabel("peak extra memory (MiB)")
        axis.grid(True, alpha=0.3)
    legend_beside(figure, axes[0], title="method")
    save(figure, path)
    plt.close(figure)


if __name__ == "__main__":
    main()
