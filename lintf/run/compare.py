"""``lintf compare``: several runs' curves in one plot, and a table of their final metrics and different settings."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lintf.layout.directories import run_label
from lintf.run.commands import CommandError
from lintf.run.run_metrics import Curves, final_values, run_curves, run_directory, run_settings

PANEL_INCHES = (5.0, 3.5)
"""Width and height of one metric's plot."""
DPI = 100
COLUMNS = 2
"""Metric plots side by side; more metrics go on further rows."""
MISSING = "-"


@dataclass
class Run:
    """A run as compared: where it is, what it logged and how it was configured."""

    path: str
    name: str
    curves: Curves
    settings: dict[str, Any]


def compare(runs: list[str], /, output: str = "compare.png") -> None:
    """Compare runs: their curves in one plot, and a table of their final metrics and the settings that differ.

    lintf compare lightning_logs/copy-linear/version_0 lightning_logs/copy-softmax/version_0 --output runs.png

    Each run's line is labelled by its directory's name and the settings of its config.yaml that differ
    between the runs (the attention, the data, ...).

    Args:
        runs: run directories (lightning_logs/copy-linear/version_3), or checkpoints inside them.
        output: the PNG file to write.
    """
    loaded = [load_run(path) for path in runs]
    names = [run.name for run in loaded]
    if len(set(names)) < len(names):  # runs of different roots that share a version number
        for run in loaded:
            run.name = os.path.relpath(run.path)
    differing = differing_settings([run.settings for run in loaded])
    print(table(loaded, differing))
    shared = [name for name in loaded[0].curves if all(name in run.curves for run in loaded[1:])]
    if not shared:
        logged = "; ".join(f"{run.name} logged {', '.join(run.curves)}" for run in loaded)
        raise CommandError(f"the runs share no metric to plot: {logged}")
    plot(loaded, shared, differing, output)
    print(f"lintf: the curves of {', '.join(shared)} are in {output}")


def load_run(path: str) -> Run:
    """The run that ``path`` names, with its metrics; CommandError for a path that is no run or one without metrics."""
    directory = run_directory(path)
    if directory is None:
        what = "does not exist" if not os.path.exists(path) else "is not a run"
        raise CommandError(f"{path} {what}: a run is a directory that lintf fit wrote (with config.yaml, event files "
                           "or metrics.csv), such as lightning_logs/copy-linear/version_0, or a checkpoint in its checkpoints/")
    curves = run_curves(directory)
    if not curves:
        raise CommandError(f"run {path} has no metrics: neither TensorBoard event files nor a metrics.csv with values "
                           f"in {directory} (a run logs once it has trained --trainer.log_every_n_steps steps)")
    return Run(directory, run_label(directory), curves, run_settings(directory))


def differing_settings(settings: Sequence[dict[str, Any]]) -> list[str]:
    """The config keys whose values are not the same in every run (a key some runs lack counts as differing)."""
    keys = dict.fromkeys(key for run in settings for key in run)
    return [key for key in keys if len({repr(run.get(key, MISSING)) for run in settings}) > 1]


def setting_text(run: Run, key: str) -> str:
    value = run.settings.get(key, MISSING)
    return value.rsplit(".", 1)[-1] if isinstance(value, str) and key.endswith("class_path") else str(value)


def label(run: Run, differing: list[str]) -> str:
    """The run's name and its values of the differing settings: ``copy-softmax/version_1 (lr=0.01)``."""
    values = [f"{short(key)}={setting_text(run, key)}" for key in differing]
    return f"{run.name} ({', '.join(values)})" if values else run.name


def short(key: str) -> str:
    """A config key without the ``model.``/``data.`` prefix where it names a setting inside it."""
    head, _, rest = key.partition(".")
    return rest if head in ("model", "data") and rest and rest != "class_path" else key


def number(value: float) -> str:
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def table(runs: list[Run], differing: list[str]) -> str:
    """One row per run: its name, its differing settings, then its final value of every metric any run logged."""
    metrics = list(dict.fromkeys(name for run in runs for name in run.curves))
    header = ["run", *(short(key) for key in differing), *metrics]
    rows = [[run.name, *(setting_text(run, key) for key in differing),
             *(number(final_values(run.curves)[name]) if name in run.curves else MISSING for name in metrics)]
            for run in runs]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [header, *rows])


def plot(runs: list[Run], metrics: list[str], differing: list[str], output: str) -> None:
    """One plot per metric, one line per run, written as a PNG of fixed size (``figure_pixels``)."""
    from matplotlib.figure import Figure  # the Agg canvas; pyplot's global backend is left alone

    rows, columns = grid(len(metrics))
    figure = Figure(figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for axis, metric in zip(axes, metrics):
        for run in runs:
            steps = list(run.curves[metric])
            axis.plot(steps, [run.curves[metric][step] for step in steps], marker="." if len(steps) < 20 else None,
                      label=label(run, differing))
        axis.set(title=metric, xlabel="step")
    for axis in axes[len(metrics):]:
        axis.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()  # every plot has every run: one legend, below them all
    figure.legend(handles, labels, loc="outside lower center", fontsize="small")
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise CommandError(f"--output {output}: the directory {directory} does not exist")
    figure.savefig(output, format="png", dpi=DPI)


def grid(count: int) -> tuple[int, int]:
    """(rows, columns) of the plots of ``count`` metrics."""
    columns = min(COLUMNS, count)
    return math.ceil(count / columns), columns


def figure_pixels(count: int) -> tuple[int, int]:
    """(width, height) in pixels of the PNG of ``count`` metrics."""
    rows, columns = grid(count)
    return round(PANEL_INCHES[0] * columns * DPI), round(PANEL_INCHES[1] * rows * DPI)
