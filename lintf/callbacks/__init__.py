"""Callbacks the CLI and configs use: checkpoints, config saving, prediction writing, sample logging."""

from lintf.callbacks.checkpoint import RunCheckpoint
from lintf.callbacks.prediction_writer import PredictionWriter
from lintf.callbacks.samples import LogSamples
from lintf.callbacks.save_config import SaveRunConfig

__all__ = ["LogSamples", "PredictionWriter", "RunCheckpoint", "SaveRunConfig"]
