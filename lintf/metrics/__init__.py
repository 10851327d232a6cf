"""Metrics shared by tasks."""

from lintf.metrics.bits_per_dim import BitsPerDim

__all__ = ["BitsPerDim"]
