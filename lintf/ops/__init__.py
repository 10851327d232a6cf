"""lintf's ops on tensors: the causal product of linear attention, its decayed relatives and the delta rule.

``causal/``     the causal product; ``causal/product.py`` is the one entry point of causal linear attention
``decayed/``    the decayed causal product (retention, gated linear attention) and AFT's decayed prefix sum
``gla/``        gated linear attention with a gate per channel (GLA)
``delta/``      the delta rule (DeltaNet, Gated DeltaNet) and the matrix state it shares with GLA
``sequence_parallel.py``  the decayed product, GLA and the delta rule over a sequence split across ranks
``common/``     what the ops share: argument checks, the accumulation dtype, the compiled CPU runtime's reports
``extension/``  the compiled library built from ``csrc/``: build, manifest, lock, load; it knows no op

Each op's ``compiled.py`` connects it to the library; everything else runs without a compiler.
"""

from lintf.ops.causal.compiled import serves as compiled_op_available
from lintf.ops.causal.product import causal_dot_product, causal_linear_attention
from lintf.ops.causal.sequence_parallel import (incoming_state, sequence_parallel_causal_dot_product,
                                                sequence_parallel_causal_linear_attention, split_sequence)
from lintf.ops.causal.state import LinearAttentionState, check_state
from lintf.ops.common.cpu import cpu_output_cache_stats, cpu_vector_path, cpu_vector_paths, empty_cpu_output_cache
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.decayed.cumsum import decayed_cumsum
from lintf.ops.decayed.product import bidirectional_decayed_dot_product, decayed_dot_product, decayed_linear_attention
from lintf.ops.delta.rule import delta_rule
from lintf.ops.delta.state import MatrixState
from lintf.ops.extension.environment import check_environment
from lintf.ops.gla.product import gated_linear_attention
from lintf.ops.sequence_parallel import (sequence_parallel_decayed_dot_product, sequence_parallel_delta_rule,
                                         sequence_parallel_gated_linear_attention)

OP_STATES = (LinearAttentionState, MatrixState)
"""State types that the ops validate where they consume them (attentions pass them on unchecked)."""

__all__ = [
    "OP_STATES",
    "LinearAttentionState",
    "MatrixState",
    "accumulation_dtype",
    "bidirectional_decayed_dot_product",
    "causal_dot_product",
    "causal_linear_attention",
    "check_environment",
    "check_state",
    "compiled_op_available",
    "cpu_output_cache_stats",
    "cpu_vector_path",
    "cpu_vector_paths",
    "decayed_cumsum",
    "decayed_dot_product",
    "decayed_linear_attention",
    "delta_rule",
    "empty_cpu_output_cache",
    "gated_linear_attention",
    "incoming_state",
    "sequence_parallel_causal_dot_product",
    "sequence_parallel_causal_linear_attention",
    "sequence_parallel_decayed_dot_product",
    "sequence_parallel_delta_rule",
    "sequence_parallel_gated_linear_attention",
    "split_sequence",
]
