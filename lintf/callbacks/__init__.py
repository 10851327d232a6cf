"""Callbacks the CLI and configs use: config saving, prediction writing, sample logging."""

from lintf.callbacks.prediction_writer import PredictionWriter
from lintf.callbacks.samples import LogSamples
from lintf.callbacks.save_config import SaveRunConfig

__all__ = ["LogSamples", "PredictionWriter", "SaveRunConfig"]
