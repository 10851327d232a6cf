"""LightningDataModules, one file per task. Each exposes ``vocab_size`` and ``max_length``,
which the CLI links to the task's arguments of the same name."""

from lintf.data.copy import CopyData
from lintf.data.images import ImageData
from lintf.data.speech import SpeechData

__all__ = ["CopyData", "ImageData", "SpeechData"]
