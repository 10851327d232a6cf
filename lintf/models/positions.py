"""Position codes added to token embeddings: learned, fixed sinusoidal, or raster (row + column).

Each is a module whose ``forward(length)`` returns the (length, d_model) codes of positions
0..length-1, ``at(position)`` the code of one position (for the recurrent ``step``) and
``documents(cu_seqlens, length)`` the codes of documents packed in one row, restarting at 0 at each
document start.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import torch
from torch import Tensor, nn

from lintf.attention.documents import check_cu_seqlens, positions_in_documents

PositionKind = Literal["learned", "sinusoidal", "raster", "none"]


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """Fixed sin/cos position codes (Vaswani et al. 2017): (length, dim)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    codes = torch.zeros(length, dim)
    codes[:, 0::2] = torch.sin(position * frequency)
    codes[:, 1::2] = torch.cos(position * frequency[: dim // 2])
    return codes


class Positions(nn.Module):
    """Codes of positions 0..max_length-1.

    Args:
        max_length: number of positions.
        d_model: size of each code.
    """

    def __init__(self, max_length: int, d_model: int) -> None:
        super().__init__()
        self.max_length, self.d_model = max_length, d_model

    def table(self) -> Tensor:
        """(max_length, d_model) codes of every position."""
        raise NotImplementedError

    def forward(self, length: int) -> Tensor:
        """(length, d_model) codes of positions 0..length-1."""
        if length > self.max_length:
            raise ValueError(f"sequence of {length} positions exceeds max_length={self.max_length}")
        return self.table()[:length]

    def at(self, position: int) -> Tensor:
        """(d_model,) code of one position."""
        return self.forward(position + 1)[position]

    def span(self, start: int, length: int) -> Tensor:
        """(length, d_model) codes of positions start..start+length-1 (a sequence continued from ``start``)."""
        if start < 0:
            raise ValueError(f"positions start at 0, got start={start}")
        return self.forward(start + length)[start:]

    def documents(self, cu_seqlens: Tensor, length: int) -> Tensor:
        """(length, d_model) codes of documents packed in one row: each document's positions count from 0.

        Args:
            cu_seqlens: (D + 1,) int boundaries of the documents, rising from 0 to ``length``.
            length: N, the positions of the row.
        """
        bounds = check_cu_seqlens("positions", cu_seqlens, length)
        longest = max(stop - start for start, stop in itertools.pairwise(bounds))
        offsets = positions_in_documents(cu_seqlens, length)  # (N,)
        table = self.forward(longest)  # (longest, d_model)
        return table[offsets.to(table.device)]


class LearnedPositions(Positions):
    """One learned embedding per position."""

    def __init__(self, max_length: int, d_model: int) -> None:
        super().__init__(max_length, d_model)
        self.embedding = nn.Parameter(torch.randn(max_length, d_model) * 0.02)

    def table(self) -> Tensor:
        return self.embedding


class SinusoidalPositions(Positions):
    """Fixed sin/cos codes; ``extended(length)`` also serves sequences longer than max_length."""

    def __init__(self, max_length: int, d_model: int) -> None:
        super().__init__(max_length, d_model)
        self.register_buffer("codes", sinusoidal_positions(max_length, d_model), persistent=False)

    def table(self) -> Tensor:
        return self.codes

    def extended(self, length: int) -> Tensor:
        """(length, d_model) codes for any length (computed beyond the table)."""
        if length <= self.max_length:
            return self.codes[:length]
        return sinusoidal_positions(length, self.d_model).to(self.codes)


class RasterPositions(Positions):
    """A learned row embedding plus a learned column embedding: every row shares the column codes.

    Args:
        max_length: number of positions (bytes of an image, minus one).
        d_model: size of each code.
        row_bytes: positions per row (28 for MNIST, 96 for CIFAR-10: 32 pixels x 3 channels).
    """

    def __init__(self, max_length: int, d_model: int, row_bytes: int) -> None:
        super().__init__(max_length, d_model)
        if row_bytes < 1:
            raise ValueError(f"raster positions need row_bytes >= 1 (28 for MNIST, 96 for CIFAR-10), got {row_bytes}")
        self.row_bytes = row_bytes
        self.row_embedding = nn.Parameter(torch.randn(-(-max_length // row_bytes), d_model) * 0.02)
        self.column_embedding = nn.Parameter(torch.randn(row_bytes, d_model) * 0.02)

    def table(self) -> Tensor:
        index = torch.arange(self.max_length, device=self.column_embedding.device)  # position
        return self.row_embedding[index // self.row_bytes] + self.column_embedding[index % self.row_bytes]

    def at(self, position: int) -> Tensor:
        if not 0 <= position < self.max_length:
            raise ValueError(f"position {position} outside 0..{self.max_length - 1}")
        return self.row_embedding[position // self.row_bytes] + self.column_embedding[position % self.row_bytes]


class NoPositions(Positions):
    """No position codes (zeros): order reaches the model only through causal attention, so a sequence
    can be read in segments of any length, or continued from a carried state, without position limits."""

    def __init__(self, max_length: int, d_model: int) -> None:
        super().__init__(max_length, d_model)
        self.register_buffer("zero", torch.zeros(d_model), persistent=False)

    def forward(self, length: int) -> Tensor:
        return self.zero.expand(length, self.d_model)

    def at(self, position: int) -> Tensor:
        return self.zero

    def span(self, start: int, length: int) -> Tensor:
        return self.zero.expand(length, self.d_model)


POSITIONS: dict[str, type[Positions]] = {
    "learned": LearnedPositions, "sinusoidal": SinusoidalPositions, "raster": RasterPositions, "none": NoPositions,
}


def build_positions(kind: PositionKind, max_length: int, d_model: int, row_bytes: int | None = None) -> Positions:
    """The position codes named ``kind``; "raster" needs ``row_bytes``."""
    if kind not in POSITIONS:
        raise ValueError(f"unknown positions {kind!r}; choose one of {', '.join(POSITIONS)}")
    if kind == "raster":
        if row_bytes is None:
            raise ValueError("positions='raster' needs row_bytes >= 1 (28 for MNIST, 96 for CIFAR-10), got None")
        return RasterPositions(max_length, d_model, row_bytes)
    return POSITIONS[kind](max_length, d_model)
