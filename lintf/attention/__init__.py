"""Attention implementations, one file per registry key. Importing this package registers them."""

from lintf.attention.base import Attention, State
from lintf.attention.linear import LinearAttention
from lintf.attention.polynomial import PolynomialAttention
from lintf.attention.reformer import ReformerAttention
from lintf.attention.softmax import SoftmaxAttention

__all__ = ["Attention", "LinearAttention", "PolynomialAttention", "ReformerAttention", "SoftmaxAttention", "State"]
