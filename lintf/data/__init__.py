"""LightningDataModules, one file per task. Each exposes ``vocab_size`` and ``max_length``,
which the CLI links to the task's arguments of the same name. The data of an example task that
lives in a package of its own lives there too."""

from lintf.data.associative_recall import AssociativeRecallData
from lintf.data.copy import CopyData
from lintf.data.images import ImageData
from lintf.data.packed_text import PackedTextData
from lintf.data.synthetic_sequences import SyntheticSequenceData
from lintf.data.text_stream import TextStreamData

__all__ = ["AssociativeRecallData", "CopyData", "ImageData", "PackedTextData", "SyntheticSequenceData", "TextStreamData"]
