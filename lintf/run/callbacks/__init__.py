"""Callbacks the CLI and configs use: checkpoints, config saving, prediction writing, sample logging."""

from lintf.run.callbacks.checkpoint import RunCheckpoint
from lintf.run.callbacks.prediction_writer import PredictionWriter
from lintf.run.callbacks.samples import LogSamples
from lintf.run.callbacks.save_config import SaveRunConfig

__all__ = ["LogSamples", "PredictionWriter", "RunCheckpoint", "SaveRunConfig"]
