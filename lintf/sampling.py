"""Choosing tokens from a model's output head, and the one loop that generates with ``prefill`` and ``step``.

``complete`` serves every autoregressive task: the copy task's greedy copies, the image task's
completions and samples, and ``lintf generate``. The given tokens are read in one parallel pass
(``prefill``); each later token is chosen from the head's distribution and fed to the recurrent
``step``, so memory stays constant for attentions with a constant-size state (``linear``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lintf.attention.base import State
from lintf.heads.base import OutputHead

StepFunction = Callable[[Tensor, int, Sequence[State]], tuple[Tensor, tuple[State, ...]]]
"""``AutoregressiveTask.step`` or a compiled equivalent: (token (B,), position, state) -> (params (B, P), state)."""
TokenCallback = Callable[[int, Tensor], None]
"""Called with (position, tokens (B,)) for every position the loop fills, as soon as it is chosen."""


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the head's distribution.

    Args:
        temperature: 0 picks the most likely token (greedy); above 0 divides the log-probabilities
            (below 1 sharper, above 1 flatter).
        top_k: draw only among the k most likely tokens; None: among all.
        top_p: draw only among the most likely tokens whose probabilities sum to at least top_p
            (nucleus sampling); 1 keeps all.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < float("inf"):  # also refuses NaN
            raise ValueError(f"temperature must be a finite number >= 0 (0 picks the most likely token, 1 samples the "
                             f"model's own distribution), got {self.temperature}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be a whole number >= 1 (or None to keep every token), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1]: the share of probability kept (1 keeps every token), "
                             f"got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def plain(self) -> bool:
        """Whether tokens come from the model's own distribution unchanged (the head's exact sampler)."""
        return self.temperature == 1 and self.top_k is None and self.top_p == 1

    def choose(self, head: OutputHead, params: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The next tokens (B,) int64 from head parameters (B, P)."""
        if self.plain:
            return head.sample(params, generator=generator)
        log_probs = head.log_probs(params)  # (B, V)
        if self.greedy:
            return log_probs.argmax(-1)
        scores = log_probs / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = scores.topk(self.top_k, dim=-1).values[..., -1:]  # (B, 1)
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1:
            scores = keep_nucleus(scores, self.top_p)
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(-1)


def keep_nucleus(scores: Tensor, top_p: float) -> Tensor:
    """``scores`` (B, V) with -inf outside the smallest set of most likely tokens whose probability reaches ``top_p``."""
    ordered, order = scores.sort(dim=-1, descending=True)
    probabilities = ordered.softmax(-1)
    dropped = probabilities.cumsum(-1) - probabilities >= top_p  # those ranked above already reach top_p
    return scores.masked_fill(torch.zeros_like(dropped).scatter(-1, order, dropped), float("-inf"))


@torch.inference_mode()
def complete(
    task: torch.nn.Module,
    tokens: Tensor,
    known: int | Tensor,
    sampling: Sampling = Sampling(),
    generator: torch.Generator | None = None,
    on_token: TokenCallback | None = None,
    step: StepFunction | None = None,
) -> Tensor:
    """Fill sequences after their given tokens: the given ones in one parallel pass, the rest with ``step``.

    Args:
        task: an ``AutoregressiveTask`` (``prefill``, ``step`` and ``head``).
        tokens: (B, T) int token ids; row b keeps its first ``known[b]`` and the rest is generated.
        known: tokens given per row, an int or (B,) ints, each in 1..T (the first token is never predicted).
            Rows given more than others are still fed their own tokens while the others generate.
        sampling: how each token is chosen.
        generator: random generator, for reproducible samples.
        on_token: called with (position, tokens (B,)) once per generated position, as soon as it is chosen.
        step: the step function (default ``task.step``), e.g. a compiled one.

    Returns:
        (B, T) int64: the given tokens, then the chosen ones.
    """
    out = tokens.clone().long()
    given = torch.as_tensor(known, device=out.device).expand(out.shape[0])  # (B,)
    if out.shape[0] and not (1 <= int(given.min()) and int(given.max()) <= out.shape[1]):
        raise ValueError(f"known must lie in 1..{out.shape[1]} (the first token is always given), got "
                         f"{known.tolist() if isinstance(known, Tensor) else known}")
    step = step or task.step
    common = int(given.min()) if out.shape[0] else out.shape[1]
    if common >= out.shape[1]:
        return out
    params, state = task.prefill(out[:, :common])  # every given token of the shortest row, in one pass
    params = params[:, -1]
    for position in range(common, out.shape[1]):
        chosen = sampling.choose(task.head, params, generator)
        out[:, position] = torch.where(position < given, out[:, position], chosen)
        if on_token is not None:
            on_token(position, out[:, position])
        if position + 1 < out.shape[1]:
            params, state = step(out[:, position], position, state)
    return out
