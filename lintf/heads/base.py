"""The output-head contract: hidden states -> a distribution over the byte values 0..255.

A head turns (..., d_model) into distribution parameters (``forward``), and evaluates one
formula, ``log_prob``, for any values. The training loss and the sampler both use it (the
sampler evaluates it at all 256 values), so samples come from exactly the trained distribution.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class OutputHead(nn.Module):
    """Base class of every output head.

    Args:
        d_model: size of the hidden states it reads.
        n_values: number of discrete values (256 for bytes).
    """

    def __init__(self, d_model: int, n_values: int = 256) -> None:
        super().__init__()
        if d_model <= 0 or n_values < 2:
            raise ValueError(f"{type(self).__name__}: need d_model > 0 and n_values >= 2, got {d_model}, {n_values}")
        self.d_model, self.n_values = d_model, n_values

    def forward(self, hidden: Tensor) -> Tensor:
        """Distribution parameters: (..., d_model) -> (..., P)."""
        raise NotImplementedError

    def log_prob(self, params: Tensor, values: Tensor) -> Tensor:
        """log p(values) in nats; params (..., P), values (...) int -> (...)."""
        raise NotImplementedError

    def log_probs(self, params: Tensor) -> Tensor:
        """log p of every value: (..., P) -> (..., n_values)."""
        every_value = torch.arange(self.n_values, device=params.device)
        expanded = params.unsqueeze(-2).expand(*params.shape[:-1], self.n_values, params.shape[-1])
        return self.log_prob(expanded, every_value.expand(*params.shape[:-1], self.n_values))

    def nll(self, params: Tensor, targets: Tensor) -> Tensor:
        """Negative log-likelihood in nats of integer targets (...) -> (...)."""
        return -self.log_prob(params, targets)

    def sample(self, params: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw values (...) int64 from the distribution given by params (..., P)."""
        probabilities = self.log_probs(params.float()).exp()  # (..., n_values)
        flat = probabilities.reshape(-1, self.n_values)
        return torch.multinomial(flat, 1, generator=generator).reshape(params.shape[:-1])
