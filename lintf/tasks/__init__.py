"""LightningModules: one file per task on the shared ``TransformerTask`` base."""

from lintf.tasks.base import TransformerTask
from lintf.tasks.copy import CopyTask

__all__ = ["CopyTask", "TransformerTask"]
