"""``LintfCache``: the per-layer attention states of a lintf encoder as a ``transformers`` cache.

Each layer keeps the state its attention's ``forward(..., return_state=True)`` and ``step`` return,
unchanged: the (C x M) sums of the recurrent attentions (``linear``, ``gla``, ``delta_net`` ...), of a
size that does not grow with the tokens read, and a ``KVCache`` for softmax and the other attentions
that keep past keys. ``generate`` passes the cache from call to call (``LintfForCausalLM`` fills it);
beam search reorders it. A recurrent state cannot be rolled back, so ``crop`` (assisted decoding) is
refused.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from lintf.attention.base import State


def map_state(state: Any, function: Any) -> Any:
    """``state`` (a NamedTuple, tuple or tensor) with ``function`` applied to every tensor in it."""
    if isinstance(state, torch.Tensor):
        return function(state)
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(map_state(value, function) for value in state))
    if isinstance(state, tuple):
        return tuple(map_state(value, function) for value in state)
    return state


class LintfCacheLayer(CacheLayerMixin):
    """One layer's attention state and the positions it has read.

    The state is lintf's (batch first in every tensor); ``update`` of key and value tensors does not
    apply to it, ``store`` replaces it after each call of the encoder.
    """

    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self) -> None:
        super().__init__()
        self.state: State | None = None
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise NotImplementedError("a lintf layer's state is created by its attention, not from keys and values")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("a lintf layer's state is replaced whole by LintfCache.store, not updated with keys")

    def store(self, state: State, new_positions: int) -> None:
        """Keep ``state``, the attention's state after ``new_positions`` more positions."""
        self.state, self.length, self.is_initialized = state, self.length + new_positions, True

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1  # no limit: a recurrent state has no time dimension, a KVCache grows

    def reset(self) -> None:
        self.state, self.length, self.is_initialized = None, 0, False

    def offload(self) -> None:
        self.state = map_state(self.state, lambda tensor: tensor.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        """Nothing to do: ``offload`` is never asked of a ``LintfCache`` (it takes no offloading option)."""

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.state = map_state(self.state, lambda tensor: tensor.index_select(0, beam_idx.to(tensor.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.state = map_state(self.state, lambda tensor: tensor.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.state = map_state(self.state, lambda tensor: tensor[indices])

    def crop(self, tokens_to_remove: int) -> None:
        raise ValueError("a lintf cache cannot drop positions: a recurrent state holds a sum over them, not each "
                         "one; generate without an assistant model")


class LintfCache(Cache):
    """The attention states of every layer of a lintf encoder, for ``generate``.

    Args:
        n_layers: layers of the encoder.
    """

    def __init__(self, n_layers: int) -> None:
        super().__init__(layers=[LintfCacheLayer() for _ in range(n_layers)])

    def states(self) -> tuple[State, ...] | None:
        """The per-layer states the encoder continues from; None before the first call."""
        if self.get_seq_length() == 0:
            return None
        return tuple(layer.state for layer in self.layers)

    def store(self, states: tuple[State, ...], new_positions: int) -> None:
        """Keep the encoder's per-layer states after ``new_positions`` more positions."""
        for layer, state in zip(self.layers, states, strict=True):
            layer.store(state, new_positions)

    def state_bytes(self) -> int:
        """Bytes held by the states' tensors (a KVCache counts its whole capacity)."""
        sizes: list[int] = []
        for layer in self.layers:
            map_state(layer.state, lambda tensor: sizes.append(tensor.numel() * tensor.element_size()))
        return sum(sizes)
