"""The recurrent state of causal linear attention: what a processed prefix leaves behind.

After positions 0..t the state is ``kv = sum_j k_j v_j^T`` (B, H, C, M) and
``normaliser = sum_j k_j`` (B, H, C), both in the accumulation dtype (fp32 for fp16, bf16 and
fp32 inputs, fp64 for fp64). Passing it as ``initial_state`` continues the sequence exactly:
the output equals that of the unsplit sequence. ``causal_dot_product`` (the numerator alone)
carries the same pair: its output ignores the normaliser, but the returned state still
advances it, so a state can be handed between the two ops.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from lintf.ops.common.dtypes import accumulation_dtype


class LinearAttentionState(NamedTuple):
    """Prefix summary of causal linear attention.

    Args:
        kv: (B, H, C, M) sum of k_j v_j^T over the prefix.
        normaliser: (B, H, C) sum of k_j over the prefix.
    """

    kv: Tensor
    normaliser: Tensor


def check_state(state: object, q: Tensor, v: Tensor, owner: str = "causal product") -> LinearAttentionState:
    """Return state as a LinearAttentionState or raise a ValueError saying what was expected.

    The one check of this state type, made by every op that consumes one.

    Args:
        state: the ``initial_state`` given by the caller.
        q: (B, H, N, C) validated queries (after any autocast cast).
        v: (B, H, N, M) validated values.
        owner: the op, for messages.
    """
    if not (isinstance(state, tuple) and len(state) == 2 and all(isinstance(t, Tensor) for t in state)):
        raise ValueError(
            f"{owner}: initial_state must be a LinearAttentionState(kv, normaliser) of two tensors, "
            f"got {type(state).__name__}"
        )
    batch, heads, _, features = q.shape
    dtype = accumulation_dtype(v.dtype)
    expected = {
        "kv": ((batch, heads, features, v.shape[-1]), "(B, H, C, M)"),
        "normaliser": ((batch, heads, features), "(B, H, C)"),
    }
    for (name, (shape, layout)), tensor in zip(expected.items(), state):
        if tuple(tensor.shape) != shape:
            raise ValueError(
                f"{owner}: initial_state.{name} must have shape {shape} {layout}, got {tuple(tensor.shape)}"
            )
        if tensor.dtype != dtype:
            raise ValueError(
                f"{owner}: initial_state.{name} must have the accumulation dtype {dtype} "
                f"(for {v.dtype} inputs), got {tensor.dtype}"
            )
        if tensor.device != q.device:
            raise ValueError(
                f"{owner}: initial_state.{name} must be on the inputs' device {q.device}, got {tensor.device}"
            )
    return LinearAttentionState(*state)
