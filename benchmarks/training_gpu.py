"""Training throughput of the stream language model on a GPU: tokens/s of each attention against softmax (SDPA).

    python -m benchmarks.training_gpu [--lengths 1024 4096 16384] [--precisions bf16-mixed 16-mixed]
        [--attentions linear gated_linear gla softmax] [--compile off on] [--d-model 512] [--tokens 65536]
        [--warmup 3] [--steps 10] [--device cuda] [--out DIR]

The model is ``StreamLanguageModelTask`` (what ``lintf fit --config configs/stream_lm.yaml`` trains; built as in
benchmarks.training_step: random weights, 256-token vocabulary, dropout 0, no position codes, every segment
from an empty state, so softmax runs SDPA's causal kernel) at d_model 512 / 8 layers / 8 heads (or 256 / 4 / 8),
for each attention of ``--attentions``. A batch fills ``--tokens``: B = tokens // N sequences of N random ids.
One step is a whole AdamW update (lr 2e-3) in a plain loop: forward and loss under autocast in the precision's
dtype (Lightning's ``bf16-mixed`` and ``16-mixed``; ``16-mixed`` with a gradient scaler, as Lightning runs it;
``32-true`` without autocast), backward, optimizer step, zero_grad. With ``--compile on`` the task's forward
is ``torch.compile``d first (its compilation falls in the warm-up steps). Each cell times ``--steps`` steps after
``--warmup`` untimed ones (synchronising the device around each) and reports the median step's tokens per
second, the peak memory the device allocated, and the ratio to softmax in the same (precision, N, compile)
row. A cell that fails (out of memory, a compile error) is reported with its error and the run goes on.
Writes training_gpu.{md,json} to --out (benchmarks/results) after every cell.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import positive_int
from benchmarks.training_step import SIZES, build_task

NAME = "training_gpu"
RESULTS = Path(__file__).parent / "results"
PRECISIONS = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
ATTENTIONS = ("linear", "gated_linear", "gla", "delta_net", "retention", "softmax")
BASELINE = "softmax"


def batch(length: int, tokens: int, device: torch.device) -> dict[str, Any]:
    """max(1, tokens // length) random sequences of length + 1 ids on device."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (max(1, tokens // length), length + 1), generator=generator)
    return {"tokens": ids.to(device), "first": True}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(task, data: dict[str, Any], precision: str, device: torch.device, warmup: int,  # noqa: ANN001
                 steps: int) -> list[float]:
    """Seconds of each of ``steps`` whole optimizer steps after ``warmup`` untimed ones."""
    dtype = PRECISIONS[precision]
    optimizer = task.configure_optimizers()
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    times = []
    for index in range(warmup + steps):
        synchronize(device)
        start = time.perf_counter()
        with warnings.catch_warnings(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            warnings.filterwarnings("ignore", message=".*self.log")
            loss = task.training_step(data, index)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return times


def measure_cell(args: argparse.Namespace, precision: str, length: int, compiled: str, attention: str) -> dict:
    """tokens/s of the median step and the peak allocated memory of one cell, or its error."""
    device = torch.device(args.device)
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        task = build_task(args.d_model, length, attention).to(device)
        task.trainer = None  # detached: self.log returns at once
        task.train()
        if compiled == "on":
            task.forward = torch.compile(task.forward)
        data = batch(length, args.tokens, device)
        seconds = step_seconds(task, data, precision, device, args.warmup, args.steps)
    except torch.cuda.OutOfMemoryError:
        return {"error": "OOM"}
    except Exception as error:  # noqa: BLE001 (a failing cell is reported, not fatal)
        print(f"  {attention} {precision} N={length} compile={compiled}: {type(error).__name__}: "
              f"{str(error).strip().splitlines()[:1]}", flush=True)
        return {"error": f"{type(error).__name__}"}
    tokens = data["tokens"][:, 1:].numel()
    median = statistics.median(seconds)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {"tokens": tokens, "step_seconds": median, "steps": seconds, "tokens_per_second": tokens / median,
            "peak_gib": peak}


def cell_text(row: dict, baseline: dict | None) -> str:
    """'tokens/s (x softmax)', or the error."""
    if "error" in row:
        return row["error"]
    text = f"{row['tokens_per_second']:,.0f}"
    if baseline is not None and "tokens_per_second" in baseline:
        text += f" ({row['tokens_per_second'] / baseline['tokens_per_second']:.2f}x)"
    return text


def table(rows: list[dict], attentions: list[str]) -> list[str]:
    """One line per (precision, compile, N): each attention's tokens/s and its ratio to softmax on the line."""
    lines = ["| precision | compile | N | B | " + " | ".join(attentions) + " |", "|---|---|---|---|" + "---:|" * len(attentions)]
    keys = sorted({(r["precision"], r["compile"], r["length"]) for r in rows},
                  key=lambda k: (list(PRECISIONS).index(k[0]), k[1], k[2]))
    for precision, compiled, length in keys:
        cells = {r["attention"]: r for r in rows if (r["precision"], r["compile"], r["length"]) == (precision, compiled,
                                                                                                      length)}
        baseline = cells.get(BASELINE)
        batch_size = next((r["tokens"] // length for r in cells.values() if "tokens" in r), "-")
        texts = [cell_text(cells[a], baseline) if a in cells else "-" for a in attentions]
        lines.append(f"| {precision} | {compiled} | {length} | {batch_size} | " + " | ".join(texts) + " |")
    return lines


def write(rows: list[dict], args: argparse.Namespace, argv: list[str], finished: bool) -> None:
    """The report so far (after every cell, so a run cut short keeps what it measured)."""
    command = f"python -m benchmarks.{NAME} " + shlex.join(argv)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    layers, heads = SIZES[args.d_model]
    lines = [
        "# Training throughput on a GPU", "", f"`{command}`", "",
        f"Device: {name}, torch {torch.__version__}, CUDA {torch.version.cuda}. Stream language model, d_model "
        f"{args.d_model}, {layers} layers, {heads} heads, {args.tokens} tokens per batch, AdamW; median of "
        f"{args.steps} steps after {args.warmup} warm-up steps. Tokens per second; in brackets the ratio to "
        f"{BASELINE} (SDPA) on the same line (> 1: faster than softmax).", "",
    ]
    if not finished:
        lines += ["**Incomplete run**: only the cells finished before the run stopped.", ""]
    lines += table(rows, args.attentions)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{NAME}.json").write_text(json.dumps(
        {"command": command, "device": name, "finished": finished, "rows": rows}, indent=1))
    if finished:
        print("\n".join(lines))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=["bf16-mixed", "16-mixed"])
    parser.add_argument("--attentions", nargs="+", choices=ATTENTIONS, default=["linear", "gated_linear", "gla", "softmax"])
    parser.add_argument("--compile", nargs="+", choices=["off", "on"], default=["off", "on"],
                        help="run each cell eagerly (off) and with the task's forward under torch.compile (on)")
    parser.add_argument("--d-model", type=int, choices=sorted(SIZES), default=512, help="512: 8 layers, 256: 4 layers")
    parser.add_argument("--tokens", type=positive_int, default=65536, help="tokens per batch (B = tokens // N)")
    parser.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first (compilation included)")
    parser.add_argument("--steps", type=positive_int, default=10, help="timed steps")
    parser.add_argument("--device", default="cuda", help="torch device (cpu checks the script itself)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"directory for {NAME}.{{md,json}}")
    args = parser.parse_args(argv)
    try:
        device_type = torch.device(args.device).type
    except RuntimeError:
        device_type = None
    if device_type not in ("cuda", "cpu"):
        parser.error(f"--device: {args.device!r} is not allowed; give cuda (cuda:N) or cpu")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is a file; give a directory (created if missing)")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"benchmarks.{NAME} needs a CUDA device (none is visible to torch here; --device cpu checks the script)")
    rows: list[dict] = []
    for precision, length, compiled, attention in itertools.product(args.precisions, args.lengths, args.compile,
                                                                    args.attentions):
        result = measure_cell(args, precision, length, compiled, attention)
        rows.append({"precision": precision, "length": length, "compile": compiled, "attention": attention, **result})
        print(f"  {attention:12s} {precision:10s} N={length:6d} compile={compiled}: "
              f"{result.get('tokens_per_second', result.get('error'))}", flush=True)
        write(rows, args, argv, finished=False)
    write(rows, args, argv, finished=True)


if __name__ == "__main__":
    main()
