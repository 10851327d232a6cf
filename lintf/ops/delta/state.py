"""The state of the matrix-memory recurrences (the delta rule, gated linear attention): one (B, H, C, M) matrix.

After positions 0..t the state is the matrix S_t of the recurrence (for the delta rule, the fast
weights that map a key to its value), in the accumulation dtype (fp32 for fp16, bf16 and fp32
inputs, fp64 for fp64). The ops take and return it as a tensor (``initial_state``, ``return_state``);
passing the returned one back continues the sequence exactly. ``MatrixState`` wraps it for code that
carries op states as named tuples (an attention's ``init_state``).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from lintf.ops.common.dtypes import accumulation_dtype


class MatrixState(NamedTuple):
    """Prefix summary of a matrix-memory recurrence.

    Args:
        kv: (B, H, C, M) the state S after the prefix, in the accumulation dtype.
    """

    kv: Tensor


def check_matrix_state(state: object, q: Tensor, v: Tensor, owner: str) -> Tensor:
    """Return ``state`` if it is a (B, H, C, M) tensor of the accumulation dtype on q's device, else a ValueError.

    Args:
        state: the ``initial_state`` given by the caller.
        q: (B, H, N, C) validated queries (after any autocast cast).
        v: (B, H, N, M) validated values.
        owner: the op, for messages.
    """
    batch, heads, _, features = q.shape
    shape = (batch, heads, features, v.shape[-1])
    dtype = accumulation_dtype(v.dtype)
    if not isinstance(state, Tensor):
        raise ValueError(
            f"{owner}: initial_state must be a tensor (B, H, C, M) = {shape} of dtype {dtype}, got "
            f"{type(state).__name__}"
        )
    if tuple(state.shape) != shape:
        raise ValueError(f"{owner}: initial_state must have shape (B, H, C, M) = {shape}, got {tuple(state.shape)}")
    if state.dtype != dtype:
        raise ValueError(
            f"{owner}: initial_state must have the accumulation dtype {dtype} (for {v.dtype} inputs), got {state.dtype}"
        )
    if state.device != q.device:
        raise ValueError(f"{owner}: initial_state must be on the inputs' device {q.device}, got {state.device}")
    return state
