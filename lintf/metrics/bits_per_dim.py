"""Bits per dimension: the negative log-likelihood of a byte, in bits, averaged over bytes."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchmetrics import Metric


class BitsPerDim(Metric):
    """Accumulates NLL in nats and the number of dimensions; sums both across processes (DDP).

    ``compute`` returns total_nats / (dims * ln 2), so the average is over every byte seen, not
    an average of per-batch averages.
    """

    higher_is_better = False
    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("nats", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("dims", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, nll_nats: Tensor, mask: Tensor | None = None, dims: Tensor | int | None = None) -> None:
        """Add per-dimension NLLs (any shape); ``mask`` (same shape, bool) keeps only True entries.

        ``dims`` counts the units they cover when those are not the entries (characters read as BPE tokens).
        """
        if mask is not None:
            nll_nats = nll_nats[mask]
        self.nats += nll_nats.detach().double().sum()
        self.dims += nll_nats.numel() if dims is None else dims

    def compute(self) -> Tensor:
        if self.dims == 0:
            raise ValueError("BitsPerDim.compute() called before any update")
        return self.nats / (self.dims.double() * math.log(2.0))
