"""How the compiled CPU ops compute their backward: recompute chunk states, or keep them from the forward.

``LINTF_CPU_BACKWARD`` chooses, read at every forward call:

* ``recompute``: the forward keeps nothing; the backward sweeps recompute the prefix states (constant
  memory in N);
* ``stored``: the forward keeps the state at every chunk boundary and the backward starts from them;
* ``auto`` (default, also when unset): ``stored`` when the chunk states take at most the op's share of
  the bytes of the inputs they come from (the causal product: 1/8), else ``recompute``. The decayed
  product's share is 0 (``lintf.ops.decayed.compiled``): its backward is no faster from kept states.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from torch import Tensor, is_grad_enabled

BACKWARD_MODES = ("recompute", "stored", "auto")
AUTO_STATE_SHARE = 1 / 8


def cpu_backward_mode() -> str:
    """``LINTF_CPU_BACKWARD``'s value, ``auto`` when unset or empty.

    Raises:
        ValueError: naming the value and the modes allowed.
    """
    value = os.environ.get("LINTF_CPU_BACKWARD") or "auto"
    if value not in BACKWARD_MODES:
        raise ValueError(f"LINTF_CPU_BACKWARD={value!r} is not valid: use one of {', '.join(BACKWARD_MODES)}, "
                         "or unset it (auto: keep the forward's chunk states when they take at most 1/8 of the "
                         "inputs' memory)")
    return value


def stores_chunk_states(state_bytes: int, input_bytes: int, auto_share: float = AUTO_STATE_SHARE) -> bool:
    """Whether a forward should keep its chunk states for the backward, under ``LINTF_CPU_BACKWARD``.

    Args:
        state_bytes: bytes the chunk states would take (every head, every chunk boundary).
        input_bytes: bytes of the inputs those states summarise (q, k, v and any gates).
        auto_share: the largest share of input_bytes that ``auto`` keeps (0: auto keeps none).
    """
    mode = cpu_backward_mode()
    if mode == "auto":
        return state_bytes <= auto_share * input_bytes
    return mode == "stored"


def backward_will_follow(tensors: Iterable[Tensor | None]) -> bool:
    """Whether autograd will differentiate an op of these inputs: grad mode on and one of them requires grad."""
    return is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def keeps_states_for_cpu_backward(inputs: Iterable[Tensor | None], state_bytes: int, input_bytes: int,
                                  auto_share: float = AUTO_STATE_SHARE) -> bool:
    """The one rule of the compiled ops that keep chunk states (causal, decayed): whether a forward keeps them.

    Only a CPU backward reads them (a GPU kernel keeps its own), only when autograd will run it, and only when
    ``stores_chunk_states`` allows their bytes.

    Args:
        inputs: the op's tensor inputs (None for an absent optional one); the first one's device decides.
        state_bytes: bytes the chunk states would take (every head, every kept boundary).
        input_bytes: bytes of the inputs those states summarise.
        auto_share: the largest share of input_bytes that ``auto`` keeps (0: auto keeps none).
    """
    tensors = [t for t in inputs if t is not None]
    if tensors[0].device.type != "cpu" or not backward_will_follow(tensors):
        return False
    return stores_chunk_states(state_bytes, input_bytes, auto_share)
