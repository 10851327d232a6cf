"""What a run logged: its scalar metrics, read from its TensorBoard event files and its ``metrics.csv``.

A run directory (``lightning_logs/copy-linear/version_3``) holds the events of the default TensorBoard logger, or
the ``metrics.csv`` of the CSV logger (``configs/logger/csv.yaml``), beside its ``config.yaml`` and
``checkpoints/``. Both are read, so a run logged either way (or both) compares with any other.
"""

from __future__ import annotations

import csv
import glob
import math
import os
from collections.abc import Mapping
from typing import Any

import yaml

from lintf.layout.directories import CHECKPOINTS_DIRECTORY, CONFIG_FILE

EVENT_FILES = "events.out.tfevents.*"
CSV_FILE = "metrics.csv"
BOOKKEEPING = ("epoch", "step", "hp_metric")
"""Columns and tags that count steps or stand in for hyper-parameters, not metrics of the model."""

Curves = dict[str, dict[int, float]]
"""Metric name -> {global step: value}."""


def is_run(directory: str) -> bool:
    """Whether ``directory`` holds what a lintf run writes: its config, logs or checkpoints."""
    return os.path.isdir(directory) and (
        os.path.isfile(os.path.join(directory, CONFIG_FILE)) or os.path.isfile(os.path.join(directory, CSV_FILE))
        or bool(glob.glob(os.path.join(directory, EVENT_FILES)))
        or os.path.isdir(os.path.join(directory, CHECKPOINTS_DIRECTORY)))


def run_directory(path: str) -> str | None:
    """The run that ``path`` names: itself, or the run of a checkpoint (or of its ``checkpoints/``); else None."""
    path = os.path.abspath(path)
    if is_run(path):
        return path
    if os.path.basename(path) == CHECKPOINTS_DIRECTORY:
        candidate = os.path.dirname(path)
    elif os.path.basename(os.path.dirname(path)) == CHECKPOINTS_DIRECTORY:
        candidate = os.path.dirname(os.path.dirname(path))
    else:
        return None
    return candidate if is_run(candidate) else None


def tensorboard_curves(directory: str) -> Curves:
    """The scalars of the event files directly in ``directory`` (a resumed run's files all count)."""
    if not glob.glob(os.path.join(directory, EVENT_FILES)):
        return {}
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(directory, size_guidance={SCALARS: 0})  # 0: every point, not a sample
    accumulator.Reload()
    return {tag: {event.step: float(event.value) for event in accumulator.Scalars(tag)}
            for tag in accumulator.Tags()[SCALARS]}


def csv_curves(directory: str) -> Curves:
    """The metrics of ``directory/metrics.csv`` (one row per logging call, empty cells where a metric was not logged)."""
    path = os.path.join(directory, CSV_FILE)
    if not os.path.isfile(path):
        return {}
    curves: Curves = {}
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            step = int(float(row.get("step") or 0))
            for name, cell in row.items():
                if name and cell not in (None, ""):
                    curves.setdefault(name, {})[step] = float(cell)
    return curves


def run_curves(directory: str) -> Curves:
    """Every metric ``directory`` logged, by step, from its event files and its CSV; bookkeeping left out."""
    curves: Curves = {}
    for source in (tensorboard_curves(directory), csv_curves(directory)):
        for name, points in source.items():
            curves.setdefault(name, {}).update(points)
    return {name: dict(sorted(points.items())) for name, points in sorted(curves.items())
            if name not in BOOKKEEPING and any(math.isfinite(value) for value in points.values())}


def final_values(curves: Curves) -> dict[str, float]:
    """Each metric's value at the last step it was logged."""
    return {name: points[max(points)] for name, points in curves.items()}


def run_settings(directory: str) -> dict[str, Any]:
    """The run's ``config.yaml`` as dotted keys (``model.encoder.attention``); {} without one."""
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path) as file:
        config = yaml.safe_load(file) or {}
    return flat(config) if isinstance(config, Mapping) else {}


def flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; ``init_args`` levels dropped (``model.init_args.encoder`` -> ``model.encoder``)."""
    flattened: dict[str, Any] = {}
    for key, value in settings.items():
        name = prefix if key == "init_args" else f"{prefix}{key}."
        if isinstance(value, Mapping) and value:
            flattened.update(flat(value, name))
        else:
            flattened[name.rstrip(".")] = value
    return flattened
