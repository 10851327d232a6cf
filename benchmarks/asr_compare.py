"""Paper section 4.3: the same CTC speech model with softmax, linear and Reformer attention,
each trained for the same wall-clock budget on the synthetic flite corpus.

Every variant is ``configs/asr_synth.yaml`` with only the attention changed, a fixed learning
rate after a linear warm-up (no schedule tied to a step count the budget cannot promise), and
``trainer.max_time`` = ``--minutes``. The best checkpoint (validation loss) is then tested on
the held-out voice. Writes under ``--out``:

* ``asr_compare.md``: CER, WER, training seconds per epoch and speed-up relative to softmax;
* ``asr_compare.png``: test CER and seconds per epoch per attention;
* ``asr_compare.json``: the numbers and settings.

    lintf data synth-speech --out data/speech/synth     # once
    python -m benchmarks.asr_compare --minutes 60        # 3 x 60 min on 2 CPU cores
    python -m benchmarks.asr_compare --minutes 0.2 --out /tmp/x -- --model.init_args.n_layers 1   # smoke check
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback

from lintf.run.cli import LintfCLI
from lintf.asr.corpora.synthetic import LM_TEXT

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "softmax": ["--model.init_args.encoder.attention", "softmax"],
    "linear": ["--model.init_args.encoder.attention", "linear"],
    "reformer": ["--model.init_args.encoder.attention", "reformer",
                 "--model.init_args.encoder.attention_kwargs", "{n_hashes: 4, chunk_size: 32}"],
}


class EpochTimes(Callback):
    """Wall-clock seconds of every completed training epoch (validation excluded)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.start = 0.0

    def on_train_epoch_start(self, trainer, pl_module):
        self.start = time.perf_counter()

    def on_validation_start(self, trainer, pl_module):
        self.paused = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.start += time.perf_counter() - self.paused

    def on_train_epoch_end(self, trainer, pl_module):
        self.seconds.append(time.perf_counter() - self.start)


def max_time(minutes: float) -> str:
    """Lightning's DD:HH:MM:SS for a budget in minutes."""
    seconds = round(minutes * 60)
    return f"{seconds // 86400:02d}:{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train_and_test(name: str, args: argparse.Namespace) -> dict:
    root = Path(args.out) / "runs" / name
    dev = Path(args.corpus) / "dev.jsonl"  # the second held-out voice, if the corpus has one
    lm_text = Path(args.corpus) / LM_TEXT  # the corpus's language-model text, else the training transcripts
    cli = LintfCLI(run=False, args=[
        "--config", str(REPO / "configs" / "asr_synth.yaml"), *VARIANTS[name],
        "--data.init_args.train_manifest", f"{args.corpus}/train.jsonl",
        "--data.init_args.val_manifest", f"{args.corpus}/val.jsonl",
        "--data.init_args.test_manifest", f"{args.corpus}/test.jsonl",
        "--data.init_args.dev_manifest", str(dev) if dev.is_file() else "null",
        "--decoding.init_args.lm_text", str(lm_text) if lm_text.is_file() else "null",
        "--model.init_args.lr_scheduler", "torch.optim.lr_scheduler.LinearLR",
        "--model.init_args.lr_scheduler.init_args.start_factor", "0.01",
        "--model.init_args.lr_scheduler.init_args.total_iters", str(args.warmup),
        "--trainer.max_time", max_time(args.minutes), "--trainer.max_steps", "-1",
        "--trainer.max_epochs", "1000", "--trainer.default_root_dir", str(root),
        "--trainer.enable_progress_bar", "false", *args.overrides,
    ])
    timer = EpochTimes()
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, cli.datamodule)
    tested = cli.trainer.test(cli.model, cli.datamodule, ckpt_path="best", verbose=False)[0]
    per_epoch = sum(timer.seconds) / max(len(timer.seconds), 1)
    result = {"cer": tested["test/cer"], "wer": tested["test/wer"], "epochs": len(timer.seconds),
              "seconds_per_epoch": per_epoch, "steps": cli.trainer.global_step}
    print(f"{name}: {result}", flush=True)
    return result


def plot(results: dict, settings: dict, path: Path) -> None:
    """Test CER and seconds per epoch, one bar (colour and hatch) per attention; ``settings`` as in the JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plot_style import bar_style, save

    figure, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    names = list(results)
    for axis, key, label, fmt in ((axes[0], "cer", "test CER (held-out voice)", "{:.3f}"),
                                  (axes[1], "seconds_per_epoch", "training seconds per epoch", "{:.0f}")):
        bars = axis.bar(names, [results[n][key] for n in names], edgecolor="black")
        for index, bar in enumerate(bars):
            bar.set(**bar_style(index))
        axis.bar_label(bars, labels=[fmt.format(results[n][key]) for n in names], fontsize=10)
        axis.set_ylabel(label)
        axis.margins(y=0.15)
    figure.suptitle(f"CTC ASR, {settings['minutes']:g} min per attention")
    save(figure, path)
    plt.close(figure)


def write_results(results: dict, args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reference = results.get("softmax", {}).get("seconds_per_epoch")
    lines = [
        "# Speech recognition with CTC: softmax vs. linear vs. Reformer (paper section 4.3)", "",
        f"`python -m benchmarks.asr_compare --minutes {args.minutes:g}` on {torch.get_num_threads()} CPU threads; "
        f"configs/asr_synth.yaml, test = held-out voice of `{args.corpus}`.", "",
        "| attention | CER | WER | epochs | s / epoch | speed-up vs softmax |", "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        speedup = f"{reference / r['seconds_per_epoch']:.2f}x" if reference else "n/a"
        lines.append(f"| {name} | {r['cer']:.3f} | {r['wer']:.3f} | {r['epochs']} | {r['seconds_per_epoch']:.0f} | {speedup} |")
    (out / "asr_compare.md").write_text("\n".join(lines) + "\n")
    (out / "asr_compare.json").write_text(json.dumps({"settings": vars(args), "results": results}, indent=2))
    plot(results, vars(args), out / "asr_compare.png")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="training wall-clock budget per attention")
    parser.add_argument("--warmup", type=int, default=500, help="linear warm-up steps before the fixed rate")
    parser.add_argument("--corpus", default="data/speech/synth", help="directory of lintf data synth-speech")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("overrides", nargs="*", help="more lintf options after --, e.g. -- --data.init_args.batch_size 8")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from --out's asr_compare.json, "
                        "without training")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads((Path(args.out) / "asr_compare.json").read_text())
        plot(saved["results"], saved["settings"], Path(args.out) / "asr_compare.png")
        return
    write_results({name: train_and_test(name, args) for name in args.variants}, args)


if __name__ == "__main__":
    main()
