"""Token ids of a text laid out for stateful training and evaluation: streams of consecutive segments, contexts.

The training part is laid out as ``B`` contiguous streams (as Transformer-XL does); batch ``j`` holds
segment ``j`` of every stream, so a task that carries each stream's recurrent state from one batch
to the next reads the whole text in order with O(1) memory per stream (``"first": True`` tells it to
reset). Validation and test read consecutive contexts, each from an empty state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor


def stream_rows(tokens: Tensor, n_streams: int) -> Tensor:
    """``tokens`` (L,) as ``n_streams`` contiguous rows (n_streams, L // n_streams); the tail is dropped."""
    length = tokens.numel() // n_streams
    if length < 2:
        raise ValueError(f"a text of {tokens.numel()} tokens cannot fill {n_streams} streams")
    return tokens[: n_streams * length].view(n_streams, length)  # stream s = tokens[s*length : (s+1)*length]


class Segments:
    """Consecutive segments of ``rows``: batch j is ``rows[:, j*T : j*T + T + 1]`` (inputs and next tokens).

    The training loader itself: its batches are made already, so no ``DataLoader`` wraps it (one around an
    ``IterableDataset`` of known length draws Lightning's warning about worker processes, which never read
    these). It is resumable: Lightning saves ``state_dict`` (the next batch) with each checkpoint, and a
    resumed or extended ``fit`` reads on from there, its first batch marked ``"first"`` (the carried state is
    not in the checkpoint) instead of reading the epoch's text again from its start.

    Under DDP each rank reads its own rows (the data module makes ``batch_size * world_size`` rows).

    Args:
        rows: (streams, length) token ids.
        segment_length: T, tokens predicted per batch and stream.
        batch_size: rows per rank.
    """

    def __init__(self, rows: Tensor, segment_length: int, batch_size: int) -> None:
        self.rows, self.segment_length, self.batch_size = rows, segment_length, batch_size
        self.start, self.next = 0, 0  # where the next pass begins; the batch after the last one read

    def __len__(self) -> int:
        return (self.rows.shape[1] - 1) // self.segment_length

    def rank_rows(self) -> Tensor:
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        mine = self.rows[rank::world]
        return mine[: self.batch_size]

    def __iter__(self) -> Iterator[dict[str, Tensor | bool]]:
        rows, length, start = self.rank_rows(), self.segment_length, self.start
        self.start = 0  # a later pass (the next epoch) reads the text from its start
        for index in range(start, len(self)):
            self.next = index + 1
            begin = index * length
            yield {"tokens": rows[:, begin : begin + length + 1], "first": index == start}

    def state_dict(self) -> dict[str, int]:
        """The batch a resumed run reads next (0: the next epoch's first)."""
        return {"next": self.next % len(self)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Begin the next pass at the saved batch."""
        self.start = self.next = int(state.get("next", 0)) % len(self)


def context_batches(tokens: Tensor, length: int, batch_size: int,
                    characters: Callable[[Tensor], int]) -> list[dict[str, Tensor | bool]]:
    """Consecutive contexts of ``tokens`` (L,) in batches: ``tokens`` (b, length + 1) each, read from an empty state.

    Args:
        tokens: the token ids of a part of the text.
        length: tokens predicted per context.
        batch_size: contexts per batch.
        characters: how many characters the predicted tokens of a context (1-D ids) stand for.

    Returns:
        batches with ``tokens``, ``first`` (True), ``start`` (b,) (each context's first token in the part)
        and ``characters`` (b,).
    """
    starts = torch.arange((tokens.numel() - 1) // length) * length
    windows = torch.stack([tokens[s : s + length + 1] for s in starts.tolist()])  # (contexts, length + 1)
    counts = torch.tensor([characters(window[1:]) for window in windows], dtype=torch.long)
    return [{"tokens": windows[i : i + batch_size], "first": True, "start": starts[i : i + batch_size],
             "characters": counts[i : i + batch_size]} for i in range(0, len(windows), batch_size)]
