"""Peak training memory of the encoder against depth, with and without reversible layers.

    python -m benchmarks.reversible_memory [--length 4096] [--layers 2 12] [--d-model 128] [--heads 4]

Each point (depth, reversible or not) runs in its own process: a training-mode TransformerEncoder
(causal linear attention, dropout 0.1, fp32, B=1) does one forward+backward as warm-up, then the
measured one; the peak resident memory above what was resident before it is reported (parameter
gradients included). One run. Targets: 12 layers within 1.3x of 2 layers' peak reversibly, against
>= 4x with every activation stored. Writes benchmarks/results/reversible_memory.{md,json}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.measure import peak_extra_mb, run_isolated, write_report
from lintf.models import EncoderConfig, TransformerEncoder

HERE = Path(__file__).resolve().parent
REVERSIBLE_TARGET, PLAIN_TARGET = 1.3, 4.0


def measure_point(n_layers: int, reversible: bool, length: int, d_model: int, heads: int) -> float:
    """Peak extra MiB of one training forward+backward of the encoder (run in a process of its own)."""
    torch.manual_seed(0)
    config = EncoderConfig(d_model=d_model, n_layers=n_layers, n_heads=heads, attention="linear", dropout=0.1,
                           reversible=reversible)
    model = TransformerEncoder(config).train()
    x = torch.randn(1, length, d_model, requires_grad=True)

    def train_step() -> None:
        model(x, causal=True).square().mean().backward()
        model.zero_grad(set_to_none=True)
        x.grad = None

    train_step()  # warm-up: first calls, allocator
    return peak_extra_mb(train_step)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: give a whole number of at least 1")
    return value


def report(results: dict[str, float], args: argparse.Namespace) -> list[str]:
    shallow, deep = min(args.layers), max(args.layers)
    command = (f"python -m benchmarks.reversible_memory --length {args.length} --layers "
               f"{' '.join(map(str, args.layers))} --d-model {args.d_model} --heads {args.heads}")
    lines = [
        "# Reversible layers: peak training memory against depth", "",
        f"`{command}`: one training forward+backward of TransformerEncoder (causal linear attention, dropout 0.1, "
        f"fp32, B=1, N={args.length}, d_model={args.d_model}, {args.heads} heads), each point in a process of its "
        f"own after one warm-up step, one run; peak resident MiB above what was resident before the step "
        f"(parameter gradients included), {torch.get_num_threads()} threads.", "",
        "| layers | stored activations, MiB | reversible, MiB |", "|---:|---:|---:|",
    ]
    for n in args.layers:
        lines.append(f"| {n} | {results[f'plain{n}']:.1f} | {results[f'reversible{n}']:.1f} |")
    plain_ratio = results[f"plain{deep}"] / results[f"plain{shallow}"]
    reversible_ratio = results[f"reversible{deep}"] / results[f"reversible{shallow}"]
    lines += ["", f"{deep} layers / {shallow} layers: stored activations {plain_ratio:.2f}x (target >= "
              f"{PLAIN_TARGET:.0f}x: {'met' if plain_ratio >= PLAIN_TARGET else 'missed'}), reversible "
              f"{reversible_ratio:.2f}x (target <= {REVERSIBLE_TARGET}x: "
              f"{'met' if reversible_ratio <= REVERSIBLE_TARGET else 'missed'})."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=positive, default=4096, help="sequence length N")
    parser.add_argument("--layers", type=positive, nargs="+", default=[2, 12], help="depths to compare")
    parser.add_argument("--d-model", type=positive, default=128)
    parser.add_argument("--heads", type=positive, default=4)
    parser.add_argument("--out", default=str(HERE / "results"), help="folder of reversible_memory.{md,json}")
    parser.add_argument("--point", nargs=2, metavar=("LAYERS", "REVERSIBLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:  # a child process: measure one point and print it
        n_layers, reversible = int(args.point[0]), args.point[1] == "true"
        print(json.dumps({"peak_mb": measure_point(n_layers, reversible, args.length, args.d_model, args.heads)}))
        return
    results = {}
    for n in args.layers:
        for kind in ("plain", "reversible"):
            point = run_isolated("benchmarks.reversible_memory", "--point", str(n), str(kind == "reversible").lower(),
                                 "--length", str(args.length), "--d-model", str(args.d_model), "--heads",
                                 str(args.heads))
            if "error" in point:
                raise SystemExit(f"reversible_memory: {n} layers, {kind}: {point['error']}")
            results[f"{kind}{n}"] = point["peak_mb"]
            print(f"{n:3d} layers {kind:10s} peak {point['peak_mb']:8.1f} MiB", flush=True)
    settings = {key: value for key, value in vars(args).items() if key not in ("out", "point")}
    write_report(args.out, "reversible_memory", report(results, args), {"settings": settings, "results": results})


if __name__ == "__main__":
    main()
