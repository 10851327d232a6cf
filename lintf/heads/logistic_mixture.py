"""Discretised mixture of logistics (Salimans et al. 2017, PixelCNN++) over byte values.

Values v in 0..255 map to x = 2 v / 255 - 1 in [-1, 1], each owning a bin of half-width 1/255.
p(v) = sum_k pi_k [sigmoid((x + 1/255 - mu_k) / s_k) - sigmoid((x - 1/255 - mu_k) / s_k)],
with the bins of 0 and 255 extended to -inf and +inf so the 256 probabilities sum to one.
Each byte is its own token here (channels are separate positions), so the mixture is
univariate: no PixelCNN++ channel coupling.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.heads.base import OutputHead
from lintf.registry import register_head

MIN_LOG_SCALE = -7.0
TINY_BIN = 1e-5  # below this bin mass, use the density at the bin centre (avoids log(0))


@register_head("logistic_mixture")
class LogisticMixtureHead(OutputHead):
    """A mixture of ``n_components`` discretised logistics; 3 parameters per component.

    Args:
        d_model: size of the hidden states.
        n_components: mixture components K.
        n_values: number of discrete values (their range is mapped to [-1, 1]).
    """

    def __init__(self, d_model: int, n_components: int = 10, n_values: int = 256) -> None:
        super().__init__(d_model, n_values)
        if n_components < 1:
            raise ValueError(f"logistic_mixture: n_components must be >= 1, got {n_components}")
        self.n_components = n_components
        self.params = nn.Linear(d_model, 3 * n_components)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.params(hidden)  # (..., 3K): mixture logits, means, log-scales

    def split(self, params: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(..., 3K) -> log mixture weights, means, log-scales, each (..., K), in fp32."""
        logits, means, log_scales = params.float().chunk(3, dim=-1)
        return logits.log_softmax(-1), means, log_scales.clamp(min=MIN_LOG_SCALE)

    def log_prob(self, params: Tensor, values: Tensor) -> Tensor:
        log_weights, means, log_scales = self.split(params)
        half_bin = 1.0 / (self.n_values - 1)
        x = (2.0 * values.float() / (self.n_values - 1) - 1.0).unsqueeze(-1)  # (..., 1) in [-1, 1]
        centred, inverse_scale = x - means, torch.exp(-log_scales)
        upper, lower = inverse_scale * (centred + half_bin), inverse_scale * (centred - half_bin)
        log_cdf_upper = upper - F.softplus(upper)  # log sigmoid(upper): mass of the lowest bin
        log_survival_lower = -F.softplus(lower)  # log (1 - sigmoid(lower)): mass of the highest bin
        bin_mass = torch.sigmoid(upper) - torch.sigmoid(lower)
        middle = inverse_scale * centred
        log_density_mass = middle - log_scales - 2.0 * F.softplus(middle) + math.log(2.0 * half_bin)
        log_middle = torch.where(bin_mass > TINY_BIN, bin_mass.clamp(min=1e-12).log(), log_density_mass)
        lowest, highest = values.unsqueeze(-1) == 0, values.unsqueeze(-1) == self.n_values - 1
        log_component = torch.where(lowest, log_cdf_upper, torch.where(highest, log_survival_lower, log_middle))
        return torch.logsumexp(log_weights + log_component, dim=-1)

    def sample(self, params: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Pick a component, draw a continuous logistic and round it to its bin.

        Rounding x to the nearest of the 256 bin centres (clamped at the ends) gives each value
        exactly the bin mass that ``log_prob`` assigns it, at O(K) cost per draw.
        """
        log_weights, means, log_scales = self.split(params)
        flat_weights = log_weights.exp().reshape(-1, self.n_components)
        component = torch.multinomial(flat_weights, 1, generator=generator).reshape(*params.shape[:-1], 1)
        mean, log_scale = means.gather(-1, component).squeeze(-1), log_scales.gather(-1, component).squeeze(-1)
        uniform = torch.rand(mean.shape, generator=generator, device=mean.device).clamp(1e-6, 1 - 1e-6)
        x = mean + log_scale.exp() * (uniform.log() - (-uniform).log1p())  # inverse logistic CDF
        levels = self.n_values - 1
        return torch.round((x + 1.0) * levels / 2.0).clamp(0, levels).long()
