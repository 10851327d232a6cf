"""What a training step of the stream language model costs on the CPU: Lightning against a plain PyTorch loop.

    python -m benchmarks.training_step                 # d_model 256, 1 thread: 30-40 minutes on a quiet machine
    python -m benchmarks.training_step --full          # also d_model 512 and 2 threads: 5-6 hours
    python -m benchmarks.training_step --sizes 256 --lengths 4096 --dtypes fp32 --threads 1   # one piece
    python -m benchmarks.training_step --add --sizes 512 --lengths 1024 --dtypes fp32   # more cells beside the saved

The model is ``StreamLanguageModelTask`` (what ``lintf fit --config configs/stream_lm.yaml`` trains) with
random weights, a 256-token vocabulary, dropout 0, no position codes and ``between_segments: reset``
(every segment from an empty state: softmax then runs SDPA's causal kernel, and its KV cache does not grow
from step to step), at d_model 256 / 4 layers / 8 heads or 512 / 8 / 8, for each attention of
``--attentions``. A batch fills ``--tokens`` (16k): B = 16384 / N sequences of N tokens (random ids).
One step is a whole AdamW update (lr 2e-3, weight decay 0.01): forward, loss, backward, optimizer step,
zero_grad, and whatever the loop does around them. Each cell (size, N, dtype, threads, attention) runs in a
process of its own with ``torch.set_num_threads(threads)``, bf16 as autocast (Lightning's "bf16-mixed"):

- Lightning: ``lightning.Trainer.fit`` of the task (no logger, checkpoints, progress bar or summary); a
  callback stamps the end of each optimizer step.
- plain: the same task's ``training_step`` (its forward and loss) in a loop of backward, step, zero_grad.

The two loops take turns (``--rounds`` rounds of each, the order flipped every round), each round
``--warmup`` untimed steps then up to ``--steps`` timed ones (fewer when they pass ``--budget`` seconds);
a step's time runs from the end of the one before to its own end (fetching the batch included); a loop's
time is the median of its timed steps. Then ``--profile-steps`` plain steps run under torch.profiler: the
share of their wall time spent in the attention op (``lintf::causal_product`` / ``lintf::decayed_product``
and their backwards, ``scaled_dot_product_attention`` and its backward for softmax) and the biggest
non-attention ops by self time. Writes training_step.{md,json} to --out (benchmarks/results).

``--add`` measures the cells asked for and merges them into the saved results, replacing saved cells of the
same key (d_model, N, dtype, threads, attention); it refuses results of another measuring protocol (tokens,
warmup, steps, rounds, budget, profile steps), CPU or torch, and reads them again when it writes, so runs
one after another build up one table. The report lists every command that made its rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from lightning.pytorch import Callback, Trainer

from benchmarks.measure import module_environment, positive_int, write_report

HERE = Path(__file__).resolve().parent
NAME = "training_step"
VOCAB = 256
SIZES = {32: (1, 2), 256: (4, 8), 512: (8, 8)}  # d_model: (layers, heads); 32 is the --quick size
ATTENTION_OPS = {"linear": "lintf::causal_product", "gated_linear": "lintf::decayed_product",
                 "softmax": "scaled_dot_product"}  # a profiled op whose name holds this is the attention's
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed"}
DEFAULT_GRID = {"sizes": [256], "lengths": [1024, 4096, 16384], "dtypes": ["fp32", "bf16"], "threads": [1],
                "attentions": ["linear", "gated_linear", "softmax"]}
FULL_GRID = {**DEFAULT_GRID, "sizes": [256, 512], "threads": [1, 2]}
QUICK_GRID = {**DEFAULT_GRID, "sizes": [32], "lengths": [32, 64], "dtypes": ["fp32"]}
CELL_KEY = ("d_model", "length", "dtype", "threads", "attention")
PROTOCOL = ("tokens", "warmup", "steps", "rounds", "budget", "profile_steps")  # what --add requires to match


class StepClock(Callback):
    """Stamps the end of every optimizer step and says when enough steps are timed.

    Args:
        warmup: untimed steps at the start (the first includes creating the optimizer's state).
        steps: timed steps wanted.
        budget: seconds of timed steps after which at least 2 are enough.
    """

    def __init__(self, warmup: int, steps: int, budget: float) -> None:
        self.warmup, self.steps, self.budget = warmup, steps, budget
        self.ends: list[float] = []

    def timed(self) -> list[float]:
        """Seconds of each timed step."""
        return [b - a for a, b in zip(self.ends, self.ends[1:])][self.warmup - 1:]

    def tick(self) -> bool:
        """Stamp a step's end; True once enough steps are timed."""
        self.ends.append(time.perf_counter())
        timed = self.timed()
        return len(timed) >= self.steps or (len(timed) >= 2 and sum(timed) > self.budget)

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self.tick():
            trainer.should_stop = True


def build_task(d_model: int, length: int, attention: str):
    from lintf.models import EncoderConfig
    from lintf.tasks import StreamLanguageModelTask

    layers, heads = SIZES[d_model]
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=d_model, n_layers=layers, n_heads=heads, attention=attention, dropout=0.0)
    optimizer = partial(torch.optim.AdamW, lr=2e-3, weight_decay=0.01)
    return StreamLanguageModelTask(VOCAB, length, encoder, between_segments="reset", optimizer=optimizer)


def batches(length: int, tokens: int, count: int) -> list[dict[str, Any]]:
    """``count`` references to one batch of max(1, tokens // length) random sequences of length + 1 ids."""
    ids = torch.randint(0, VOCAB, (max(1, tokens // length), length + 1), generator=torch.Generator().manual_seed(1))
    return [{"tokens": ids, "first": True}] * count


def run_lightning(task, data: list[dict[str, Any]], dtype: str, clock: StepClock) -> None:
    trainer = Trainer(accelerator="cpu", devices=1, precision=PRECISIONS[dtype], max_steps=len(data), logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, limit_val_batches=0, callbacks=[clock])
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    trainer.fit(task, train_dataloaders=loader)


def plain_step(task, optimizer: torch.optim.Optimizer, batch: dict[str, Any], index: int, dtype: str) -> Tensor:  # noqa: ANN001
    """One whole optimizer step of a task detached from any trainer (``trainer = None``); returns its loss."""
    with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        warnings.filterwarnings("ignore", message=".*self.log")
        loss = task.training_step(batch, index)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def run_plain(task, data: list[dict[str, Any]], dtype: str, clock: StepClock | None) -> None:
    task.trainer = None  # detached from an earlier fit: self.log then returns at once
    optimizer = task.configure_optimizers()
    task.train()
    for index, batch in enumerate(data):
        plain_step(task, optimizer, batch, index, dtype)
        if clock is not None and clock.tick():
            return


def within(event, op: str) -> bool:
    """Whether profiler ``event`` (None: no event) or one of its callers is the attention op ``op``."""
    while event is not None:
        if op in event.name:
            return True
        event = event.cpu_parent
    return False


def attention_seconds(events, op: str) -> tuple[float, dict[str, float]]:
    """Seconds inside the attention op (its outermost calls) and the other ops' self seconds by name."""
    inside, others = 0.0, defaultdict(float)
    for event in events:
        if not within(event, op):
            others[event.name] += event.self_cpu_time_total / 1e6
        elif op in event.name and not within(event.cpu_parent, op):
            inside += event.cpu_time_total / 1e6
    return inside, others


def profile(task, data: list[dict[str, Any]], dtype: str, attention: str) -> dict[str, Any]:
    """The attention op's share of the wall time of plain steps, and the 5 biggest other ops by self time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        run_plain(task, data, dtype, None)
        wall = time.perf_counter() - start
    inside, others = attention_seconds(profiler.events(), ATTENTION_OPS[attention])
    top = sorted(others.items(), key=lambda item: -item[1])[:5]
    return {"attention_share": inside / wall, "profiled_seconds": wall,
            "top_other_ops": [{"op": name, "share": seconds / wall} for name, seconds in top]}


def measure_cell(args: argparse.Namespace, d_model: int, length: int, dtype: str, threads: int,
                 attention: str) -> dict[str, Any]:
    """Both loops' median step seconds over alternating rounds, then the profile (in this process)."""
    torch.set_num_threads(threads)
    task, data = build_task(d_model, length, attention), batches(length, args.tokens, args.warmup + args.steps)
    times: dict[str, list[float]] = {"lightning": [], "plain": []}
    for round_index in range(args.rounds):
        for loop in ("lightning", "plain")[:: 1 if round_index % 2 == 0 else -1]:
            clock = StepClock(args.warmup, args.steps, args.budget)
            (run_lightning if loop == "lightning" else run_plain)(task, data, dtype, clock)
            times[loop] += clock.timed()
    tokens = data[0]["tokens"][:, 1:].numel()
    result = {"tokens": tokens, "batch": data[0]["tokens"].shape[0]}
    for loop, seconds in times.items():
        result[loop] = {"step_seconds": statistics.median(seconds), "steps": seconds,
                        "tokens_per_second": tokens / statistics.median(seconds)}
    result["overhead"] = result["lightning"]["step_seconds"] / result["plain"]["step_seconds"] - 1
    return {**result, **profile(task, data[: 1 + args.profile_steps], dtype, attention)}


def cell_options(args: argparse.Namespace) -> list[str]:
    return ["--tokens", str(args.tokens), "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--rounds", str(args.rounds), "--budget", str(args.budget), "--profile-steps", str(args.profile_steps)]


def run_cell(args: argparse.Namespace, cell: dict[str, Any]) -> dict[str, Any]:
    """One cell in a fresh process; {"error": last line of stderr} when it fails."""
    key = [str(cell[name]) for name in ("d_model", "length", "dtype", "threads", "attention")]
    command = [sys.executable, "-m", f"benchmarks.{NAME}", "--cell", *key, *cell_options(args)]
    done = subprocess.run(command, capture_output=True, text=True, env=module_environment(), check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for d_model in args.sizes:
        for length in args.lengths:
            for dtype in args.dtypes:
                for threads in args.threads:
                    for attention in args.attentions:
                        cell = {"d_model": d_model, "length": length, "dtype": dtype, "threads": threads,
                                "attention": attention}
                        start = time.time()
                        rows.append({**cell, **run_cell(args, cell), "cell_seconds": time.time() - start})
                        print(json.dumps(rows[-1]), flush=True)
    return rows


def cpu_model() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    return f"{names[0] if names else 'unknown CPU'} ({os.cpu_count()} CPUs)"


def headline(rows: list[dict[str, Any]]) -> list[str]:
    """The targets: Lightning's overhead under 5%, linear attention's step faster than softmax's from N = 1k."""
    done = [row for row in rows if "overhead" in row]
    lines = []
    if done:
        worst, median = max(done, key=lambda row: row["overhead"]), statistics.median(r["overhead"] for r in done)
        lines.append(f"- Lightning's step over the plain loop's: median {median:+.1%}, "
                     f"largest {worst['overhead']:+.1%} ({label(worst)}) (target: under 5%; "
                     f"{'met' if worst['overhead'] < 0.05 else 'missed'})")
    ratios = []
    for row in done:
        softmax = next((r for r in done if r["attention"] == "softmax"
                        and all(r[k] == row[k] for k in ("d_model", "length", "dtype", "threads"))), None)
        if row["attention"] == "linear" and softmax and row["length"] >= 1024:
            ratios.append((softmax["plain"]["step_seconds"] / row["plain"]["step_seconds"], row))
    if ratios:
        slowest = min(ratios, key=lambda item: item[0])
        lines.append(f"- softmax's step over linear's (plain loop), N >= 1k: from {slowest[0]:.2f}x "
                     f"({label(slowest[1])}) to {max(r for r, _ in ratios):.2f}x (target: linear faster from N = 1k; "
                     f"{'met' if slowest[0] > 1 else 'missed'})")
    return lines


def label(row: dict[str, Any]) -> str:
    return f"d_model {row['d_model']}, N = {row['length']:,}, {row['dtype']}, {row['threads']} thread(s)"


def render(rows: list[dict[str, Any]], runs: list[dict[str, Any]], protocol: dict[str, Any]) -> list[str]:
    import lightning

    commands = [f"`{run['command']}` (load average before / after: {run['load_average'][0]:.1f} / "
                f"{run['load_average'][1]:.1f})" for run in runs]
    lines = ["# A training step of the stream language model on the CPU: Lightning against a plain loop", "",
             *(["Made by " + "; then ".join(commands) + "."] if len(commands) > 1 else [f"Made by {commands[0]}."]),
             "",
             f"{protocol['cpu']}; torch {protocol['torch']}, lightning {lightning.__version__}. {protocol['tokens']:,} "
             f"tokens per batch (B = {protocol['tokens']} / N), AdamW, vocabulary {VOCAB}, dropout 0; median of up to "
             f"{protocol['steps']} timed steps in each of {protocol['rounds']} alternating rounds per loop after "
             f"{protocol['warmup']} untimed ones. Attention share: the attention op's part of "
             f"{protocol['profile_steps']} profiled plain step(s); other ops by self time.", "",
             *headline(rows), "",
             "| d_model | N | B | dtype | threads | attention | Lightning tokens/s | plain tokens/s "
             "| Lightning / plain | attention op | biggest other ops (share of the step) |",
             "|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---|"]
    for row in rows:
        cells = [f"{row['d_model']}", f"{row['length']:,}", f"{row.get('batch', '-')}", row["dtype"],
                 f"{row['threads']}", row["attention"]]
        if "overhead" not in row:
            lines.append("| " + " | ".join(cells) + f" | failed: {row.get('error', '?')} | | | | |")
            continue
        others = ", ".join(f"{op['op']} {op['share']:.0%}" for op in row["top_other_ops"][:3])
        lines.append("| " + " | ".join(cells) + f" | {row['lightning']['tokens_per_second']:,.0f} | "
                     f"{row['plain']['tokens_per_second']:,.0f} | {1 + row['overhead']:.3f} | "
                     f"{row['attention_share']:.0%} | {others} |")
    return lines


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the whole grid: both sizes, 1 and 2 threads")
    parser.add_argument("--quick", action="store_true", help="tiny shapes that check the script runs (seconds)")
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(SIZES), help="d_model (256: 4 layers, 512: 8)")
    parser.add_argument("--lengths", type=positive_int, nargs="+", help="sequence lengths N")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(PRECISIONS))
    parser.add_argument("--threads", type=positive_int, nargs="+", help="torch threads of each cell's process")
    parser.add_argument("--attentions", nargs="+", choices=sorted(ATTENTION_OPS))
    parser.add_argument("--tokens", type=positive_int, default=16384, help="tokens per batch (B = tokens // N)")
    parser.add_argument("--warmup", type=positive_int, default=1, help="untimed steps of each round")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps of each round, at most")
    parser.add_argument("--rounds", type=positive_int, default=2, help="rounds of each loop, taking turns")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of timed steps a round may stop after")
    parser.add_argument("--profile-steps", type=positive_int, default=1, help="plain steps under torch.profiler")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="directory of the .md and .json")
    parser.add_argument("--add", action="store_true", help="measure only the cells asked for and merge them into "
                        "the saved results of the same protocol")
    parser.add_argument("--cell", nargs=5, metavar=("D_MODEL", "N", "DTYPE", "THREADS", "ATTENTION"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    grid = QUICK_GRID if args.quick else FULL_GRID if args.full else DEFAULT_GRID
    for name, default in grid.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.quick:
        args.tokens, args.warmup, args.steps, args.rounds = min(args.tokens, 128), 1, 2, 1
    return args


def protocol_of(args: argparse.Namespace) -> dict[str, Any]:
    """What rows must share to sit in one table: the measuring protocol, the CPU and torch."""
    return {**{name: getattr(args, name) for name in PROTOCOL}, "cpu": cpu_model(), "torch": torch.__version__}


def saved_results(args: argparse.Namespace) -> dict[str, Any]:
    """``--out``'s training_step.json, which ``--add`` merges into, after checking it has this run's protocol."""
    path = args.out / f"{NAME}.json"
    if not path.exists():
        raise SystemExit(f"--add merges into {path}, which does not exist: run without --add first")
    saved = json.loads(path.read_text())
    if saved.get("protocol") != protocol_of(args):
        raise SystemExit(f"--add merges only results of the same protocol: {path} holds {saved.get('protocol')}, "
                         f"this run has {protocol_of(args)}")
    return saved


def merged(saved: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The saved rows whose cells were not measured again, and the new rows, in grid order."""
    new = {tuple(row[k] for k in CELL_KEY) for row in rows}
    kept = [row for row in saved["rows"] if tuple(row[k] for k in CELL_KEY) not in new]
    order = {"dtype": sorted(PRECISIONS, key=lambda name: name != "fp32"), "attention": list(ATTENTION_OPS)}
    return sorted(kept + rows, key=lambda row: (row["d_model"], row["threads"], order["dtype"].index(row["dtype"]),
                                                row["length"], order["attention"].index(row["attention"])))


def main() -> None:
    args = parse()
    if args.cell:  # one cell, in the process run_cell started
        d_model, length, dtype, threads, attention = args.cell
        print(json.dumps(measure_cell(args, int(d_model), int(length), dtype, int(threads), attention)))
        return
    if args.add:
        saved_results(args)  # refuse another protocol before measuring
    load_before = os.getloadavg()
    rows = measure_all(args)
    run = {"command": " ".join(["python -m benchmarks." + NAME, *sys.argv[1:]]),
           "load_average": [load_before[0], os.getloadavg()[0]], "settings": {
               name: getattr(args, name) for name in ("sizes", "lengths", "dtypes", "threads", "attentions")}}
    runs = [run]
    if args.add:  # read again now: a run that finished meanwhile keeps its rows
        saved = saved_results(args)
        rows, runs = merged(saved, rows), saved["runs"] + runs
    protocol = protocol_of(args)
    write_report(args.out, NAME, render(rows, runs, protocol), {"protocol": protocol, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
