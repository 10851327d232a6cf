"""A 256-way softmax over byte values (PixelRNN-style): no ordinal assumption, 256 logits."""

from __future__ import annotations

from torch import Tensor, nn

from lintf.heads.base import OutputHead
from lintf.registry import register_head


@register_head("categorical")
class CategoricalHead(OutputHead):
    """Softmax over ``n_values`` logits.

    Args:
        d_model: size of the hidden states.
        n_values: number of discrete values.
    """

    def __init__(self, d_model: int, n_values: int = 256) -> None:
        super().__init__(d_model, n_values)
        self.logits = nn.Linear(d_model, n_values)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.logits(hidden)

    def log_prob(self, params: Tensor, values: Tensor) -> Tensor:
        log_probs = params.float().log_softmax(-1)
        return log_probs.gather(-1, values.unsqueeze(-1)).squeeze(-1)

    def log_probs(self, params: Tensor) -> Tensor:
        return params.float().log_softmax(-1)
