"""Training on packed documents against one document per padded row: tokens of text per second, one run.

    OMP_NUM_THREADS=1 python -m benchmarks.packed_documents            # d_model 64, rows of 256, 3 attentions
    python -m benchmarks.packed_documents --quick                      # a few steps, for tests

The documents are the first ``--documents`` verses of the King James Bible (one verse per document, as
``lintf.data.PackedTextData`` reads ``kjv`` with ``document_separator "\\n"``), read as UTF-8 bytes. Both
layouts train the same ``StreamLanguageModelTask`` (random weights, vocabulary 256, dropout 0, no position
codes) on the same documents with rows of ``--length`` inputs, ``--batch`` rows per step:

- padded: each document in a row of its own (a document longer than a row takes several), padded to the
  row length; padded positions are masked (``key_padding_mask``) and not predicted;
- packed: the documents end to end, cut into full rows (``lintf.data.text_documents``), each batch one
  packed row with ``cu_seqlens``; a target that begins a document is not predicted.

A step is forward, loss (cross-entropy over the predicted targets), backward and an AdamW update. The two
layouts take turns (``--rounds`` rounds, the order flipped every round), each round ``--warmup`` untimed
steps then ``--steps`` timed ones over its batches in order; tokens per second count the text's tokens in
the timed steps (padding excluded) over their seconds. The ratio packed / padded is of one run. Writes
packed_documents.{md,json} to --out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.measure import positive_int, write_report

HERE = Path(__file__).resolve().parent
NAME = "packed_documents"
VOCAB = 256
ATTENTIONS = {"softmax": ("softmax", "projections"), "linear": ("linear", "projections"),
              "gated_delta_net": ("gated_delta_net", "recipe")}


def documents(count: int) -> list[list[int]]:
    """The UTF-8 bytes of the first ``count`` verses of the King James Bible, one document each."""
    from lintf.data.cache import data_directory
    from lintf.data.text_documents import read_documents

    verses = read_documents("kjv", data_directory(None, "text"), "\n")[:count]
    return [list(verse.encode("utf-8")) for verse in verses]


def padded_batches(docs: list[list[int]], length: int, batch: int) -> list[dict[str, Any]]:
    """One document per row (split into rows of ``length`` inputs when longer), padded: inputs, targets, mask."""
    rows = []
    for doc in docs:
        for start in range(0, len(doc) - 1, length):
            piece = torch.tensor(doc[start : start + length + 1])  # inputs and next tokens
            inputs, targets = torch.zeros(length, dtype=torch.long), torch.full((length,), -100)
            inputs[: piece.numel() - 1], targets[: piece.numel() - 1] = piece[:-1], piece[1:]
            rows.append((inputs, targets))
    out = []
    for first in range(0, len(rows) - batch + 1, batch):
        inputs, targets = (torch.stack(part) for part in zip(*rows[first : first + batch]))
        out.append({"inputs": inputs, "targets": targets, "key_padding_mask": targets == -100,
                    "text_tokens": int((targets != -100).sum())})
    return out


def packed_batches(docs: list[list[int]], length: int, batch: int) -> list[dict[str, Any]]:
    """The documents end to end in full rows, ``batch`` rows per packed row with cu_seqlens."""
    from lintf.data.text_documents import PackedRows, collate_rows, lay_end_to_end

    rows = PackedRows(*lay_end_to_end(docs), length)
    out = []
    for first in range(0, len(rows) - batch + 1, batch):
        packed = collate_rows([rows[i] for i in range(first, first + batch)])
        out.append({**packed, "text_tokens": packed["inputs"].numel()})
    return out


def build_task(attention: str, d_model: int, layers: int, heads: int, length: int):
    from lintf.models import EncoderConfig
    from lintf.tasks import StreamLanguageModelTask

    name, layer = ATTENTIONS[attention]
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=d_model, n_layers=layers, n_heads=heads, attention=name, layer=layer,
                            dropout=0.0)
    optimizer = partial(torch.optim.AdamW, lr=2e-3, weight_decay=0.01)
    return StreamLanguageModelTask(VOCAB, length, encoder, between_segments="reset", optimizer=optimizer)


def step(task, optimizer: torch.optim.Optimizer, batch: dict[str, Any]) -> None:
    """One optimizer step; the same loss for both layouts (padding and document starts are not predicted)."""
    if "cu_seqlens" in batch:
        logits = task(batch["inputs"], cu_seqlens=batch["cu_seqlens"])
    else:
        logits = task(batch["inputs"], key_padding_mask=batch["key_padding_mask"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(args: argparse.Namespace, attention: str, layouts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each layout's text tokens per second over alternating rounds of timed steps."""
    task = build_task(attention, args.d_model, args.layers, args.heads, args.length).train()
    optimizer = task.configure_optimizers()
    seconds = {layout: 0.0 for layout in layouts}
    tokens = {layout: 0 for layout in layouts}
    position = {layout: 0 for layout in layouts}
    for round_index in range(args.rounds):
        for layout in list(layouts)[:: 1 if round_index % 2 == 0 else -1]:
            batches = layouts[layout]
            for index in range(args.warmup + args.steps):
                batch = batches[position[layout] % len(batches)]
                position[layout] += 1
                start = time.perf_counter()
                step(task, optimizer, batch)
                if index >= args.warmup:
                    seconds[layout] += time.perf_counter() - start
                    tokens[layout] += batch["text_tokens"]
    result = {layout: {"tokens_per_second": tokens[layout] / seconds[layout], "text_tokens": tokens[layout],
                       "seconds": seconds[layout]} for layout in layouts}
    result["ratio"] = result["packed"]["tokens_per_second"] / result["padded"]["tokens_per_second"]
    return result


def report(args: argparse.Namespace, layouts: dict[str, list[dict[str, Any]]], docs: list[list[int]],
           results: dict[str, Any]) -> list[str]:
    positions = {name: sum(b["inputs"].numel() for b in batches) for name, batches in layouts.items()}
    text = {name: sum(b["text_tokens"] for b in batches) for name, batches in layouts.items()}
    lengths = sorted(len(doc) for doc in docs)
    lines = [
        "# Packed documents against padded rows: training tokens per second",
        "",
        (f"Command: `OMP_NUM_THREADS={torch.get_num_threads()} python -m benchmarks.packed_documents"
        f"{''.join(' ' + a for a in sys.argv[1:])}`"),
        "",
        (f"{len(docs)} documents (King James verses, UTF-8 bytes; median {lengths[len(lengths) // 2]}, longest "
        f"{lengths[-1]} bytes); rows of {args.length} inputs, {args.batch} rows per step; d_model {args.d_model}, "
        f"{args.layers} layers, {args.heads} heads; {args.rounds} rounds of {args.warmup} untimed + {args.steps} "
        f"timed steps per layout; torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"{platform.processor() or platform.machine()}."),
        "",
        (f"Padding: the padded layout's rows hold {text['padded'] / positions['padded']:.0%} text "
        f"({len(layouts['padded'])} steps per pass over the documents); packed rows hold 100% "
        f"({len(layouts['packed'])} steps)."),
        "",
        "| attention | padded tokens/s | packed tokens/s | packed / padded |",
        "|---|---|---|---|",
    ]
    for attention, result in results.items():
        lines.append(f"| {attention} | {result['padded']['tokens_per_second']:,.0f} | "
                     f"{result['packed']['tokens_per_second']:,.0f} | {result['ratio']:.2f} |")
    lines += ["", "Tokens per second count the text's tokens (not padding) in the timed steps."]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=positive_int, default=2000)
    parser.add_argument("--length", type=positive_int, default=256)
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--d-model", type=positive_int, default=64)
    parser.add_argument("--layers", type=positive_int, default=2)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--attentions", nargs="+", choices=list(ATTENTIONS), default=list(ATTENTIONS))
    parser.add_argument("--warmup", type=positive_int, default=2)
    parser.add_argument("--steps", type=positive_int, default=10)
    parser.add_argument("--rounds", type=positive_int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few steps (tests)")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.documents, args.length, args.batch, args.d_model, args.layers = 60, 32, 2, 16, 1
        args.heads, args.warmup, args.steps, args.rounds = 2, 1, 2, 1
    docs = documents(args.documents)
    layouts = {"padded": padded_batches(docs, args.length, args.batch),
               "packed": packed_batches(docs, args.length, args.batch)}
    results = {attention: measure(args, attention, layouts) for attention in args.attentions}
    payload = {"arguments": {k: v for k, v in vars(args).items() if k != "out"}, "threads": torch.get_num_threads(),
               "torch": torch.__version__, "results": results}
    write_report(args.out, NAME, report(args, layouts, docs, results), payload)


if __name__ == "__main__":
    main()
