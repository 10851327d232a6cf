"""Stateful training over streams: a character LM trained on 256-character segments, with and without carried state.

    python -m benchmarks.stream_lm [--steps 2000] [--attentions linear gated_linear] [--eval-lengths 256 8192 0]
    python -m benchmarks.stream_lm --add --attentions gla delta_net   # new rows beside the saved ones

Every variant is ``configs/stream_lm.yaml`` (the King James Bible as 16 streams of consecutive
256-character segments, no position codes) with one of ``--attentions``, trained for the same number
of steps from the same seed; the two variants of an attention differ only in ``between_segments``:
"carry" starts each segment from the state the stream's previous segment left (truncated BPTT),
"reset" from an empty state. Each is then tested on the held-out end of the text in contexts of
every ``--eval-lengths`` (each read in one parallel pass from an empty state; 0 = the whole test
text as one context, which equals reading it segment by segment with the state carried).
Writes benchmarks/results/stream_lm.{md,json}; ``--add`` trains only ``--attentions`` and merges their
rows into the saved results, which must come from the same steps, eval lengths, overrides and thread
count; it reads them again when it writes, so ``--add`` runs started side by side (one per core with
OMP_NUM_THREADS=1) all land.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lintf.run.cli import LintfCLI
from lintf.data import TextStreamData

from benchmarks.measure import write_report

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
VARIANTS = ("carry", "reset")


def train(attention: str, variant: str, args: argparse.Namespace) -> LintfCLI:
    cli = LintfCLI(run=False, args=[
        "--config", str(REPO / "configs" / "stream_lm.yaml"),
        "--model.init_args.encoder.attention", attention, "--model.init_args.between_segments", variant,
        "--model.init_args.lr_scheduler.init_args.total_steps", str(args.steps),
        "--trainer.max_steps", str(args.steps), "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(args.out / "runs" / f"{attention}-{variant}"),
        "--trainer.logger", "false", "--trainer.enable_checkpointing", "false", *args.overrides,
    ])
    start = time.time()
    cli.trainer.fit(cli.model, cli.datamodule)
    cli.train_seconds = time.time() - start
    return cli


def test_bits_per_char(cli: LintfCLI, eval_length: int) -> float:
    settings = {k: v for k, v in cli.datamodule.hparams.items() if not k.startswith("_")}  # not the CLI's own keys
    whole = len(cli.datamodule.texts["test"]) - 1
    data = TextStreamData(**{**settings, "eval_length": eval_length or whole, "eval_batch_size": 8})
    return float(cli.trainer.test(cli.model, datamodule=data, verbose=False)[0]["test/bits_per_char"])


def saved_rows(args: argparse.Namespace) -> list[dict]:
    """The rows of ``--out``'s stream_lm.json that --add keeps: of the same settings, other attentions."""
    path = args.out / "stream_lm.json"
    if not path.exists():
        raise SystemExit(f"--add merges into {path}, which does not exist: run without --add first")
    saved = json.loads(path.read_text())
    settings = {"steps": args.steps, "eval_lengths": args.eval_lengths, "overrides": args.overrides,
                "threads": torch.get_num_threads()}  # the training seconds compare only on as many threads
    stored = {"steps": saved["steps"], "eval_lengths": saved.get("eval_lengths", [256, 8192, 0]),
              "overrides": saved.get("overrides", []), "threads": saved.get("threads", 1)}
    if stored != settings:
        raise SystemExit(f"--add merges only results of the same settings: {path} holds {stored}, asked for {settings}")
    return [row for row in saved["results"] if row["attention"] not in args.attentions]


def report(rows: list[dict], attentions: list[str], args: argparse.Namespace) -> list[str]:
    lengths = args.eval_lengths
    lines = ["# Stateful training over streams (truncated BPTT)", "",
             f"`python -m benchmarks.stream_lm --steps {args.steps} --attentions {' '.join(attentions)}`: "
             f"configs/stream_lm.yaml, {args.steps} steps of 16 streams x 256 characters, {torch.get_num_threads()} "
             "threads. Test bits per character on the held-out end of the King James Bible, read in contexts of each "
             "length from an empty state (the whole test text: one context, i.e. the state carried throughout).", "",
             "| attention | between training segments | "
             + " | ".join(f"contexts of {n}" if n else "whole test text" for n in lengths) + " | training s |",
             "|---|---|" + "---:|" * (len(lengths) + 1)]
    for row in rows:
        cells = " | ".join(f"{row['bits_per_char'][str(n)]:.3f}" for n in lengths)
        lines.append(f"| {row['attention']} | {row['between_segments']} | {cells} | {row['train_seconds']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--attentions", nargs="+", default=["linear", "gated_linear"])
    parser.add_argument("--eval-lengths", type=int, nargs="+", default=[256, 8192, 0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--add", action="store_true", help="train only --attentions and merge their rows into the "
                        "saved results of the same settings")
    parser.add_argument("overrides", nargs="*", help="more lintf options after --, e.g. -- --data.init_args.batch_size 8")
    args = parser.parse_args()
    if args.add:
        saved_rows(args)  # refuse other settings before training
    rows = []
    for attention in args.attentions:
        for variant in VARIANTS:
            cli = train(attention, variant, args)
            row = {"attention": attention, "between_segments": variant, "train_seconds": round(cli.train_seconds),
                   "bits_per_char": {str(n): test_bits_per_char(cli, n) for n in args.eval_lengths}}
            print(row, flush=True)
            rows.append(row)
    if args.add:  # read again now, so that runs started side by side all keep their rows
        rows = saved_rows(args) + rows
    attentions = list(dict.fromkeys(row["attention"] for row in rows))
    write_report(args.out, "stream_lm", report(rows, attentions, args), {
        "steps": args.steps, "eval_lengths": args.eval_lengths, "overrides": args.overrides,
        "threads": torch.get_num_threads(), "attentions": attentions, "results": rows})


if __name__ == "__main__":
    main()
