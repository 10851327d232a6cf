"""LightningModules: one file per task on the shared ``TransformerTask`` base."""

from lintf.tasks.asr import ASRTask
from lintf.tasks.base import TransformerTask
from lintf.tasks.copy import CopyTask
from lintf.tasks.image_generation import ImageGenerationTask

__all__ = ["ASRTask", "CopyTask", "ImageGenerationTask", "TransformerTask"]
