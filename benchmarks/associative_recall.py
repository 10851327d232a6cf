"""Which attention remembers: multi-query associative recall (MQAR, Arora et al. 2023 "Zoology") accuracy.

For every sequence length N in ``--lengths``, each attention trains the same small
AssociativeRecallTask from the same seed for the same number of steps on fresh sequences that mix
every key-value count P in ``--pairs`` with 4 P <= N (the pairs, then every key asked for once) in
equal shares, as Zoology trains on a mixture; each batch holds ``--batch-tokens`` tokens
(``batch-tokens / N`` sequences, so a step costs about the same at every N). The model then answers
the queries of held-out sequences of each P on its own; the score is the share of values recalled.
A column is an attention (``gla``), its layer recipe (``gla+recipe``, ``encoder.layer: recipe``) or a
hybrid pattern repeated to ``--n-layers`` (``gated_delta_net+recipe,softmax``). With several ``--lr``
each column trains at each rate and keeps its best, as Zoology sweeps the rate per model.

The token embeddings start at std 0.02 (``--embedding-std``), the scale of the learned position
codes, as GPT-2 and Zoology initialise both. By default the model reads the sequences with the value
after each query blanked (``--answers hidden``, Zoology's layout): with the values shown, a model
that picks a value of the sequence not yet asked for scores about 0.52 at 4 pairs without tying any
value to its key. To tie a value to its key a model needs the token before each value; a short
convolution hands it over (the layer recipes of DeltaNet, Gated DeltaNet and softmax, and Zoology's
models, have one), while a bare attention must first learn to look one position back, a plateau of
thousands of steps. Queries stand mostly soon after their pairs and a few far (``--query-gaps power_law``,
Zoology's power-law gaps); with ``uniform`` they stand anywhere alike, and the decays of gated layers at their
initialisation forget the pairs before the gradient can teach them to keep them.
``benchmarks/results/associative_recall.md`` holds what was measured, ``docs/associative_recall.md`` why.

Writes under ``--out``:

* ``associative_recall.md``: accuracy per (N, P) and attention;
* ``associative_recall.png``: accuracy against P, one panel per N;
* ``associative_recall.json``: the settings and, per (N, P), accuracy, and the final training loss and
  training time of the model of that N.

    python -m benchmarks.associative_recall                         # every column at N = 256, 16 pairs (hours)
    python -m benchmarks.associative_recall --lengths 64 128 256 512 --pairs 4 8 16 32 64  # hours on a CPU
    python -m benchmarks.associative_recall --accelerator gpu       # on a GPU
    python -m benchmarks.associative_recall --attentions linear delta_net --lengths 128 --pairs 8 16
    python -m benchmarks.associative_recall --attentions gla+recipe gated_delta_net+recipe,softmax --lr 1e-3 3e-3
    python -m benchmarks.associative_recall --quick                 # a smoke run of a few seconds per cell
    python -m benchmarks.associative_recall --add --attentions gla  # one more column beside the saved ones

The results are written again as each attention finishes, so a stopped run keeps the attentions it
finished. ``--add`` keeps the saved attentions of the same settings (sizes, steps, seed, threads) and
re-reads them at each write, so runs started side by side (one per core, ``OMP_NUM_THREADS=1``) all
land in one table; it refuses results of other settings.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch.utils.data import ConcatDataset, DataLoader

import lintf
from benchmarks.measure import write_report, write_whole
from lintf.data import AssociativeRecallData
from lintf.data.associative_recall import QUERY_GAPS
from lintf.models import EncoderConfig
from lintf.registry import ATTENTIONS
from lintf.tasks import AssociativeRecallTask
from lintf.tasks.associative_recall import ANSWER_LAYOUTS

ATTENTIONS_COMPARED = ["softmax", *(name for name in lintf.list_attentions()
                                     if name != "softmax" and ATTENTIONS.get(name).supports_causal)]
COLUMNS_COMPARED = [*ATTENTIONS_COMPARED,
                    *(f"{name}+recipe" for name in ATTENTIONS_COMPARED if name in lintf.list_layers()),
                    "gated_delta_net+recipe,softmax"]
"""The default columns: every causal attention of the registry bare (softmax first), then each with its layer
recipe, then a hybrid."""
QUICK = {"lengths": [32], "pairs": [2, 4], "steps": 20, "batch_tokens": 256, "test_size": 32, "d_model": 16,
         "n_layers": 2, "n_heads": 2}
"""--quick: every size small enough for a smoke run; the attentions stay those asked for."""


class FinalLoss(Callback):
    """Training loss of the last optimizer step."""

    def __init__(self) -> None:
        self.loss = float("nan")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.loss = float(outputs["loss"])


def cells(lengths: list[int], pairs: list[int]) -> list[tuple[int, int]]:
    """(N, P) with room for P pairs and P queries of two tokens each."""
    return [(length, count) for length in lengths for count in pairs if 4 * count <= length]


def encoder_of(column: str, args: argparse.Namespace) -> EncoderConfig:
    """The encoder a column names: ``name``, ``name+recipe`` (its layer recipe), or a hybrid pattern of those
    joined by commas, repeated to ``--n-layers`` (``gated_delta_net+recipe,softmax``)."""
    entries = [entry.partition("+") for entry in column.split(",")]
    names = [name for name, _, _ in entries]
    layers = ["recipe" if kind == "recipe" else "projections" for _, _, kind in entries]
    return EncoderConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, dropout=0.0,
                         attention=names if len(names) > 1 else names[0],
                         layer=layers if len(layers) > 1 else layers[0])


def check_column(column: str) -> str:
    """``column`` if every entry is a causal attention, with ``+recipe`` only where it has a layer recipe."""
    causal = [name for name in lintf.list_attentions() if ATTENTIONS.get(name).supports_causal]
    for entry in column.split(","):
        name, plus, kind = entry.partition("+")
        if name not in causal:
            raise argparse.ArgumentTypeError(f"{name!r} in {column!r} is not a causal attention; choose from "
                                             f"{', '.join(causal)}")
        if plus and (kind != "recipe" or name not in lintf.list_layers()):
            raise argparse.ArgumentTypeError(f"{entry!r}: only '+recipe' is allowed, for an attention with a layer "
                                             f"recipe ({', '.join(lintf.list_layers())})")
    return column


def train_length(attention: str, length: int, pairs: list[int], args: argparse.Namespace,
                 lr: float | None = None) -> dict[str, dict]:
    """Train one column at length N on a mixture of the pair counts at learning rate ``lr`` (None: the first of
    ``--lr``); test accuracy, final loss, time per (N, P)."""
    lr = args.lr[0] if lr is None else lr
    seed_everything(args.seed, verbose=False)
    batch = max(1, args.batch_tokens // length)
    share = -(-batch * args.steps // len(pairs))  # training sequences per pair count, ceil
    data = {count: AssociativeRecallData(n_pairs=count, max_length=length, n_keys=args.n_keys, n_values=args.n_values,
                                         batch_size=batch, train_size=share, test_size=args.test_size, seed=args.seed,
                                         query_gaps=args.query_gaps)
            for count in pairs}
    mixture = DataLoader(ConcatDataset([split.split("train") for split in data.values()]), batch_size=batch,
                         shuffle=True)
    model = AssociativeRecallTask(
        data[pairs[0]].vocab_size, length, encoder_of(attention, args),
        optimizer=partial(torch.optim.AdamW, lr=lr, weight_decay=args.weight_decay),
        lr_scheduler=partial(torch.optim.lr_scheduler.OneCycleLR, max_lr=lr, total_steps=args.steps,
                             pct_start=0.1),
        answers=args.answers,
    )
    torch.nn.init.normal_(model.token_embedding.weight, std=args.embedding_std)
    final = FinalLoss()
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False,
             "accelerator": args.accelerator, "devices": 1}
    trainer = Trainer(max_steps=args.steps, enable_checkpointing=False, limit_val_batches=0, callbacks=[final], **quiet)
    start = time.perf_counter()
    trainer.fit(model, train_dataloaders=mixture)
    wall = time.perf_counter() - start
    results = {}
    for count, split in data.items():
        accuracy = Trainer(**quiet).test(model, split.test_dataloader(), verbose=False)[0]["test/accuracy"]
        print(f"{attention} lr {lr:g} N={length} P={count}: accuracy {accuracy:.3f}", flush=True)
        results[f"{length}x{count}"] = {"accuracy": accuracy, "final_loss": final.loss, "train_seconds": wall,
                                        "lr": lr}
    print(f"{attention} lr {lr:g} N={length}: final training loss {final.loss:.3f}, {wall:.0f} s", flush=True)
    return results


def best_over_rates(attention: str, length: int, pairs: list[int], args: argparse.Namespace) -> dict[str, dict]:
    """Train at each ``--lr`` and keep the rate of the highest mean accuracy over the pair counts (as Zoology picks
    each model's rate); every rate's mean accuracy is kept beside the cells as ``sweep``."""
    runs = {lr: train_length(attention, length, pairs, args, lr) for lr in args.lr}
    means = {lr: sum(cell["accuracy"] for cell in run.values()) / len(run) for lr, run in runs.items()}
    best = max(means, key=means.get)
    return {cell: {**result, "sweep": {f"{lr:g}": mean for lr, mean in means.items()}}
            for cell, result in runs[best].items()}


def plot(results: dict, settings: dict, path: Path) -> None:
    """Accuracy against key-value pairs, one panel per sequence length, one line (colour and marker) per attention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plot_style import legend_beside, save, series_style

    lengths = [n for n in settings["lengths"] if any(4 * p <= n for p in settings["pairs"])]
    figure, axes = plt.subplots(1, len(lengths), figsize=(3.2 * len(lengths), 3.4), sharey=True, squeeze=False)
    for panel, length in zip(axes[0], lengths):
        for index, (name, by_cell) in enumerate(results.items()):
            points = [(p, by_cell[f"{length}x{p}"]["accuracy"]) for p in settings["pairs"]
                      if f"{length}x{p}" in by_cell]
            panel.plot(*zip(*points), label=name, linewidth=1.2, markersize=5, **series_style(index))
        panel.set(title=f"N = {length}", xlabel="key-value pairs", xscale="log", ylim=(-0.02, 1.02))
        panel.set_xticks(settings["pairs"], [str(p) for p in settings["pairs"]])
        panel.minorticks_off()
        panel.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("recall accuracy")
    legend_beside(figure, list(axes[0]), title="attention")
    save(figure, path)
    plt.close(figure)


def settings_of(args: argparse.Namespace) -> dict:
    """What a column's numbers depend on: every option but the attentions and the output, and the thread count."""
    skipped = ("out", "replot", "attentions", "add")
    settings = {**{k: v for k, v in vars(args).items() if k not in skipped}, "threads": torch.get_num_threads()}
    if args.accelerator != "cpu" and torch.cuda.is_available():
        settings["device"] = torch.cuda.get_device_name()
    return settings


def saved_results(args: argparse.Namespace) -> dict:
    """The attentions of ``--out``'s associative_recall.json, which --add keeps (same settings only) until this run
    has its own column of the same name: one still in training keeps its saved column meanwhile."""
    path = Path(args.out) / "associative_recall.json"
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    stored = {k: v for k, v in saved["settings"].items() if k != "attentions"}
    stored.setdefault("threads", 1)
    if stored != settings_of(args):
        raise SystemExit(f"--add merges only results of the same settings: {path} holds {stored}, "
                         f"asked for {settings_of(args)}")
    return saved["results"]


def in_table_order(results: dict) -> dict:
    """The compared attentions in their usual order, then any others by name."""
    rank = {name: index for index, name in enumerate(COLUMNS_COMPARED)}
    return {name: results[name] for name in sorted(results, key=lambda n: (rank.get(n, len(rank)), n))}


def command_of(settings: dict) -> str:
    """The command that reproduces these settings: the module and every option that differs from its default."""
    defaults = vars(parse(["--quick"] if settings.get("quick") else []))  # --quick implies its sizes
    options = []
    for name, value in settings.items():
        if name in defaults and value != defaults[name] and name not in ("quick", "attentions"):
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            options.append(f"--{name.replace('_', '-')} {shown}")
    return " ".join(["python -m benchmarks.associative_recall", *(["--quick"] if settings.get("quick") else []),
                     *options])


def report(results: dict, settings: dict) -> list[str]:
    """The Markdown table of accuracy per (N, P), one column per attention, under the settings it came from."""
    threads = settings.get("threads", 1)
    hardware = settings.get("device") or f"{threads} CPU thread{'s' if threads != 1 else ''}"
    names = list(results)
    rates = settings["lr"] if isinstance(settings["lr"], list) else [settings["lr"]]
    many = len(rates) > 1
    rates = " / ".join(f"{rate:g}" for rate in rates)
    embedding = f"; token embeddings drawn with std {settings.get('embedding_std', 1.0)}"
    answers = {"hidden": "; the value after each query blanked in the input (Zoology's layout)",
               "shown": "; the value after each query shown in the input"}[settings.get("answers", "shown")]
    gaps = {"power_law": "; queries mostly soon after the pairs (Zoology's power-law gaps)",
            "uniform": "; queries anywhere in their region alike"}[settings.get("query_gaps", "uniform")]
    lines = [
        "# Multi-query associative recall (MQAR)", "",
        f"`{command_of(settings)}` on {hardware}: {settings['d_model']}-wide, {settings['n_layers']}-layer models "
        f"with {settings['n_heads']} heads, one per attention and N, each trained {settings['steps']} steps of "
        f"{settings['batch_tokens']} tokens on a mixture of the pair counts P of its N (AdamW, one-cycle peak lr "
        f"{rates}{', the best per column and N by mean accuracy on the same held-out sequences' if many else ''}; "
        f"weight decay {settings.get('weight_decay', 0.01)}; seed {settings['seed']}; {settings['n_keys']} key and "
        f"{settings['n_values']} value tokens{embedding}{answers}{gaps}). Share of queried values recalled on "
        f"{settings['test_size']} held-out sequences of each (N, P) (chance: 1/{settings['n_values']}). A column "
        "`NAME+recipe` is the attention's layer recipe (`encoder.layer: recipe`); `A,B` is a hybrid stack of that "
        "pattern. Why these settings, and what was measured on the way: `docs/associative_recall.md`.", "",
        f"| N | pairs | {' | '.join(names)} |", f"|---|---|{'---|' * len(names)}",
    ]
    for length, pairs in cells(settings["lengths"], settings["pairs"]):
        row = [f"{results[name][f'{length}x{pairs}']['accuracy']:.3f}" for name in names]
        lines.append(f"| {length} | {pairs} | {' | '.join(row)} |")
    if many:
        for length in sorted({length for length, _ in cells(settings["lengths"], settings["pairs"])}):
            chosen = [f"{next(c['lr'] for k, c in results[n].items() if k.startswith(f'{length}x')):g}"
                      for n in names]
            lines.append(f"| {length} | lr chosen | {' | '.join(chosen)} |")
    return lines


def write_results(finished: dict, args: argparse.Namespace) -> None:
    """Write the table, plot and JSON of the finished attentions (and, with --add, of the saved ones)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = in_table_order({**(saved_results(args) if args.add else {}), **finished})
    settings = {**settings_of(args), "attentions": list(results)}
    plot(results, settings, out / "associative_recall.png")
    write_report(out, "associative_recall", report(results, settings), {"settings": settings, "results": results})


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attentions", nargs="+", default=COLUMNS_COMPARED, type=check_column,
                        help="columns: an attention, NAME+recipe for its layer recipe, or a hybrid pattern of those "
                        "joined by commas (gated_delta_net+recipe,softmax), repeated to --n-layers")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256], help="sequence lengths N")
    parser.add_argument("--pairs", type=int, nargs="+", default=[16], help="key-value pairs P")
    parser.add_argument("--steps", type=int, default=3000, help="optimizer steps per attention and N")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens per training batch (sequences: / N)")
    parser.add_argument("--test-size", type=int, default=512, help="held-out sequences per cell")
    parser.add_argument("--n-keys", type=int, default=64, help="key tokens (at least the largest P)")
    parser.add_argument("--n-values", type=int, default=64, help="value tokens")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-3], help="peak learning rates; with several, "
                        "each column trains at each and keeps the best (mean accuracy over its cells)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW's weight decay")
    parser.add_argument("--embedding-std", type=float, default=0.02, help="initial std of the token embeddings: "
                        "0.02 puts them on the scale of the learned position codes; 1 is the task's own N(0, 1)")
    parser.add_argument("--answers", choices=ANSWER_LAYOUTS, default="hidden", help="hidden: the value after each "
                        "query is blanked in what the model reads (Zoology's layout); shown: it stands in the input, "
                        "so picking a value not yet asked for scores about half at 4 pairs")
    parser.add_argument("--query-gaps", choices=QUERY_GAPS, default="power_law", help="where queries stand in "
                        "their region: power_law (Zoology's: mostly soon after the pairs) or uniform (anywhere alike)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accelerator", default="cpu", help="Lightning's accelerator: cpu, gpu, auto")
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--replot", action="store_true", help="redraw the PNG and the table from --out's "
                        "associative_recall.json")
    parser.add_argument("--add", action="store_true", help="train only --attentions and merge them into the saved "
                        "results of the same settings")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if not cells(args.lengths, args.pairs):
        parser.error(f"no (N, P) with 4 P <= N among --lengths {args.lengths} and --pairs {args.pairs}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.replot:
        saved = json.loads((Path(args.out) / "associative_recall.json").read_text())
        plot(saved["results"], saved["settings"], Path(args.out) / "associative_recall.png")
        table = report(saved["results"], saved["settings"])
        write_whole(Path(args.out) / "associative_recall.md", "\n".join(table) + "\n")
        return
    if args.add:
        saved_results(args)  # refuse other settings before training
    lengths = sorted({length for length, _ in cells(args.lengths, args.pairs)})
    finished = {}
    for name in args.attentions:
        finished[name] = {cell: result for length in lengths
                          for cell, result in best_over_rates(name, length, [p for n, p in cells([length], args.pairs)],
                                                              args).items()}
        write_results(finished, args)


if __name__ == "__main__":
    main()
