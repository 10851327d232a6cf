"""Attention implementations, one file per registry key. Importing this package registers them."""

from lintf.attention.aft import AFTSimpleAttention
from lintf.attention.axial import AxialAttention
from lintf.attention.base import Attention, State
from lintf.attention.bigbird import BigBirdAttention
from lintf.attention.blockwise import BlockwiseAttention
from lintf.attention.clustered import ClusteredAttention
from lintf.attention.delta_net import DeltaNetAttention
from lintf.attention.gated_delta_net import GatedDeltaNetAttention
from lintf.attention.gated_linear import GatedLinearAttention
from lintf.attention.gla import GLAAttention
from lintf.attention.improved_clustered import ImprovedClusteredAttention
from lintf.attention.linear import LinearAttention
from lintf.attention.linformer import LinformerAttention
from lintf.attention.local import LocalAttention
from lintf.attention.longformer import LongformerAttention
from lintf.attention.memory_compressed import MemoryCompressedAttention
from lintf.attention.polynomial import PolynomialAttention
from lintf.attention.reformer import ReformerAttention
from lintf.attention.retention import RetentionAttention
from lintf.attention.routing import RoutingAttention
from lintf.attention.softmax import SoftmaxAttention
from lintf.attention.sparse_fixed import SparseFixedAttention
from lintf.attention.sparse_strided import SparseStridedAttention
from lintf.attention.topk import TopKAttention

__all__ = [
    "AFTSimpleAttention",
    "Attention",
    "AxialAttention",
    "BigBirdAttention",
    "BlockwiseAttention",
    "ClusteredAttention",
    "DeltaNetAttention",
    "GLAAttention",
    "GatedDeltaNetAttention",
    "GatedLinearAttention",
    "ImprovedClusteredAttention",
    "LinearAttention",
    "LinformerAttention",
    "LocalAttention",
    "LongformerAttention",
    "MemoryCompressedAttention",
    "PolynomialAttention",
    "ReformerAttention",
    "RetentionAttention",
    "RoutingAttention",
    "SoftmaxAttention",
    "SparseFixedAttention",
    "SparseStridedAttention",
    "State",
    "TopKAttention",
]
