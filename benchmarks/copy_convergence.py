"""Paper Figure 2: copy-task training loss vs. step for every registered causal attention.

Every variant trains the same CopyTask on the same CopyData with the same seed, optimizer and
schedule; only the attention differs (its registry defaults; Reformer with 1 and 4 hashing rounds;
``linear (NAME)`` variants swap linear attention's feature map). Writes under ``--out``:

* ``copy_convergence.png``: training loss (smoothed) against optimizer steps;
* ``copy_convergence.md``: final loss, steps to ``--threshold``, copied-half accuracy, wall time;
* ``copy_convergence.json``: the raw per-step losses and the settings.

    python -m benchmarks.copy_convergence                      # every causal attention (~1 h on one thread)
    python -m benchmarks.copy_convergence --variants softmax linear "linear (taylor)"
    python -m benchmarks.copy_convergence --add --variants longformer bigbird   # new rows beside the saved ones

``--add`` trains only the named variants and merges them into the saved results, which must come
from the same settings (steps, batch, model, learning rate, seed); the saved variants keep their rows.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer, seed_everything

import lintf
from lintf.data import CopyData
from lintf.models import EncoderConfig
from lintf.registry import ATTENTIONS
from lintf.tasks import CopyTask


def all_variants() -> dict[str, dict]:
    """Variant name -> EncoderConfig options: each causal attention, Reformer's rounds, linear's feature maps."""
    variants = {name: {"attention": name} for name in lintf.list_attentions()
                if getattr(ATTENTIONS.get(name), "supports_causal", True) and name != "reformer"}
    variants["reformer (1 round)"] = {"attention": "reformer", "attention_kwargs": {"n_hashes": 1}}
    variants["reformer (4 rounds)"] = {"attention": "reformer", "attention_kwargs": {"n_hashes": 4}}
    for feature_map in lintf.list_feature_maps():
        if feature_map != "elu":  # elu is linear's default
            variants[f"linear ({feature_map})"] = {"attention": "linear", "feature_map": feature_map}
    return variants


VARIANTS = all_variants()
DEFAULT_VARIANTS = [name for name in VARIANTS if not name.startswith("linear (")]


class LossCurve(Callback):
    """Training loss after every optimizer step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def smooth(values: list[float], weight: float = 0.95) -> list[float]:
    """Exponential moving average, bias-corrected like TensorBoard's smoothing."""
    out, average = [], 0.0
    for i, value in enumerate(values, start=1):
        average = weight * average + (1 - weight) * value
        out.append(average / (1 - weight**i))
    return out


def train(name: str, args: argparse.Namespace) -> dict:
    seed_everything(args.seed, verbose=False)
    data = CopyData(max_length=args.max_length, batch_size=args.batch_size, train_size=args.batch_size * args.steps,
                    val_size=512, seed=args.seed)
    encoder = EncoderConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, dropout=0.0,
                            **VARIANTS[name])
    model = CopyTask(
        data.vocab_size, args.max_length, encoder,
        optimizer=partial(torch.optim.AdamW, lr=args.lr),
        lr_scheduler=partial(torch.optim.lr_scheduler.OneCycleLR, max_lr=args.lr, total_steps=args.steps, pct_start=0.1),
    )
    curve = LossCurve()
    trainer = Trainer(
        max_steps=args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, callbacks=[curve], accelerator="cpu",
    )
    start = time.perf_counter()
    trainer.fit(model, data)
    wall = time.perf_counter() - start
    evaluator = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    accuracy = evaluator.validate(model, data.val_dataloader(), verbose=False)[0]["val/accuracy"]
    smoothed = smooth(curve.losses)
    reached = next((i + 1 for i, loss in enumerate(smoothed) if loss < args.threshold), None)
    print(f"{name}: final loss {smoothed[-1]:.3f}, accuracy {accuracy:.3f}, {wall:.0f} s", flush=True)
    return {"losses": curve.losses, "final_loss": smoothed[-1], "steps_to_threshold": reached,
            "accuracy": accuracy, "wall_seconds": wall}


def plot(results: dict, settings: dict, path: Path) -> None:
    """Smoothed training loss against steps, one line (colour and marker) per variant; ``settings`` as in the JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plot_style import legend_beside, marks_every, save, series_style

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for index, (name, result) in enumerate(results.items()):
        losses = smooth(result["losses"])
        axes.plot(range(1, len(losses) + 1), losses, label=name, linewidth=1.2, markersize=5,
                  markevery=marks_every(len(losses), index), **series_style(index))
    axes.axhline(settings["threshold"], color="grey", linestyle=":", linewidth=1, label=f"loss {settings['threshold']:g}")
    axes.set(xlabel="gradient step", ylabel="cross-entropy (copied half, smoothed)", yscale="log",
             title=f"Copy task, max length {settings['max_length']}, batch {settings['batch_size']}")
    axes.grid(True, which="major", alpha=0.3)
    legend_beside(figure, [axes], title="attention")
    save(figure, path)
    plt.close(figure)


def write_results(results: dict, args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(results, vars(args), out / "copy_convergence.png")
    settings = ", ".join(f"{k}={v}" for k, v in vars(args).items() if k not in ("out", "replot", "add"))
    lines = [
        "# Copy-task convergence (paper Figure 2)", "",
        f"`python -m benchmarks.copy_convergence` on {torch.get_num_threads()} CPU threads; {settings}. Wall times "
        "come from one run on a machine shared with other work.", "",
        f"| attention | final loss | steps to loss < {args.threshold} | copied-half accuracy | wall time (s) |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        steps = r["steps_to_threshold"] if r["steps_to_threshold"] is not None else f"not within {args.steps}"
        lines.append(f"| {name} | {r['final_loss']:.3f} | {steps} | {r['accuracy']:.3f} | {r['wall_seconds']:.0f} |")
    (out / "copy_convergence.md").write_text("\n".join(lines) + "\n")
    saved_settings = {k: v for k, v in vars(args).items() if k != "add"}
    (out / "copy_convergence.json").write_text(json.dumps({"settings": saved_settings, "results": results}))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=0.5, help="loss defining 'converged'")
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--add", action="store_true", help="train only --variants and merge them into the saved "
                        "results (same settings)")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from --out's copy_convergence.json, "
                        "without training")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads((Path(args.out) / "copy_convergence.json").read_text())
        plot(saved["results"], saved["settings"], Path(args.out) / "copy_convergence.png")
        return
    saved = saved_results(args) if args.add else {}
    results = {**saved, **{name: train(name, args) for name in args.variants}}
    args.variants = list(results)
    write_results(results, args)


def saved_results(args: argparse.Namespace) -> dict:
    """The results saved under --out, refused when they were trained with other settings than these."""
    path = Path(args.out) / "copy_convergence.json"
    if not path.is_file():
        raise SystemExit(f"--add merges into {path}, which does not exist: run without --add first")
    saved = json.loads(path.read_text())
    compared = [k for k in vars(args) if k not in ("variants", "out", "replot", "add")]
    differing = [f"{k}: saved {saved['settings'].get(k)!r}, now {getattr(args, k)!r}" for k in compared
                 if saved["settings"].get(k) != getattr(args, k)]
    if differing:
        raise SystemExit(f"--add needs the saved results' settings; these differ: {'; '.join(differing)}")
    return saved["results"]


if __name__ == "__main__":
    main()
