"""Transformer stacks built from registry names."""

from lintf.models.attention_layer import MultiHeadAttention
from lintf.models.encoder_config import EncoderConfig
from lintf.models.transformer import TransformerEncoder, TransformerLayer, build_head_attention

__all__ = ["EncoderConfig", "MultiHeadAttention", "TransformerEncoder", "TransformerLayer", "build_head_attention"]
