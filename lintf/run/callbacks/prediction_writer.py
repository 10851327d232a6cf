"""Write ``predict_step`` rows to JSON lines and report the task's prediction metrics."""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from lintf.layout.directories import run_directory, unused_path


class PredictionWriter(BasePredictionWriter):
    """Appends every predicted row (a dict) to ``predictions[-rank<r>].jsonl`` in the run directory's ``predictions/``
    (``predictions-1/``, ... for later predicts of the same run).

    At the end it averages the task's ``prediction_metrics`` (e.g. exact_match) over the rows and
    writes them to ``prediction_metrics[-rank<r>].json``; once the progress bar has finished, one
    line on its own reports them and where the rows are.

    Args:
        output_dir: directory for the files; None uses ``predictions/`` in the run directory.
        write_interval: write after each batch (constant memory) or once per epoch.
    """

    def __init__(self, output_dir: str | None = None, write_interval: Literal["batch", "epoch"] = "batch") -> None:
        super().__init__(write_interval)
        self.output_dir = output_dir
        self.path: str | None = None
        self.suffix = ""
        self.totals: dict[str, float] = {}
        self.count = 0
        self.report: str | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        directory = self.output_dir
        if directory is None:  # a folder for each predict of the run: earlier predictions stay
            directory = trainer.strategy.broadcast(unused_path(os.path.join(run_directory(trainer), "predictions")))
        os.makedirs(directory, exist_ok=True)
        self.suffix = f"-rank{trainer.global_rank}" if trainer.world_size > 1 else ""
        self.path = os.path.join(directory, f"predictions{self.suffix}.jsonl")
        open(self.path, "w").close()
        self.totals, self.count, self.report = {}, 0, None

    def _write(self, pl_module: LightningModule, rows: list[dict[str, Any]]) -> None:
        with open(self.path, "a") as file:
            for row in rows:
                file.write(json.dumps(row) + "\n")
        for name in getattr(pl_module, "prediction_metrics", ()):
            self.totals[name] = self.totals.get(name, 0.0) + sum(float(row[name]) for row in rows)
        self.count += len(rows)

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self._write(pl_module, prediction)

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        for rows in predictions:
            self._write(pl_module, rows)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_predict_epoch_end(trainer, pl_module)
        metrics = {name: total / max(self.count, 1) for name, total in self.totals.items()}
        with open(os.path.join(os.path.dirname(self.path), f"prediction_metrics{self.suffix}.json"), "w") as file:
            json.dump({**metrics, "n": self.count}, file, indent=2)
        summary = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
        self.report = f"predicted {self.count} sequences: {summary}; rows written to {self.path}"

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # After the loop: the progress bar has ended its line (a report printed at epoch end continued it).
        if stage == "predict" and self.report is not None:
            print(self.report, flush=True)
            self.report = None
