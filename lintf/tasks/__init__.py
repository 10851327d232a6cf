"""LightningModules: the ``TransformerTask`` root, causal token models, the copy, associative-recall, image and
text-stream tasks.

Example tasks beyond these live in packages of their own, build on these, and plug into the
``lintf`` command as extensions (``lintf.run.extensions``).
"""

from lintf.tasks.associative_recall import AssociativeRecallTask
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.base import TransformerTask
from lintf.tasks.copy import CopyTask
from lintf.tasks.image_generation import ImageGenerationTask
from lintf.tasks.masked_next_token import MaskedNextTokenSteps
from lintf.tasks.stream_lm import StreamLanguageModelTask

__all__ = [
    "AssociativeRecallTask",
    "AutoregressiveTask",
    "CopyTask",
    "ImageGenerationTask",
    "MaskedNextTokenSteps",
    "StreamLanguageModelTask",
    "TransformerTask",
]
