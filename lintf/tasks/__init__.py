"""LightningModules: the ``TransformerTask`` root, causal token models, the copy, image and text-stream tasks.

Speech recognition, the third example task, lives in ``lintf.asr`` and builds on these.
"""

from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.base import TransformerTask
from lintf.tasks.copy import CopyTask
from lintf.tasks.image_generation import ImageGenerationTask
from lintf.tasks.stream_lm import StreamLanguageModelTask

__all__ = ["AutoregressiveTask", "CopyTask", "ImageGenerationTask", "StreamLanguageModelTask", "TransformerTask"]
