"""One sequence generated token by token in constant memory: each token handed on as soon as it is chosen.

``complete`` fills a (B, T) tensor, which suits batches of known length (the copy task's checks, image
grids); ``stream_tokens`` keeps nothing but the recurrent state, so ``lintf generate --max_new_tokens``
may ask for any number of tokens without a buffer of that size. Both choose the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from lintf.sampling import Sampling, StepFunction
from lintf.tasks.autoregressive import AutoregressiveTask


def stream_tokens(task: AutoregressiveTask, prompt: list[int], count: int, sampling: Sampling,
                  generator: torch.Generator | None = None, step: StepFunction | None = None) -> Iterator[int]:
    """The ``count`` tokens after ``prompt``, yielded one by one as they are chosen.

    Args:
        task: the model (``prefill``, ``step`` and ``head``).
        prompt: the given token ids (at least one), read in one parallel pass.
        count: tokens to generate.
        sampling: how each token is chosen.
        generator: random generator, for reproducible samples.
        step: the step function (default ``task.step``), e.g. a compiled one.
    """
    step = step or task.step
    end = len(prompt) + count
    # inference mode per call, not around the yields: the caller's code between tokens runs in its own mode
    with torch.inference_mode():
        params, state = task.prefill(torch.tensor([prompt], dtype=torch.long, device=task.device))
        params = params[:, -1]  # (1, P): the distribution of the first new token
    for position in range(len(prompt), end):
        with torch.inference_mode():
            chosen = sampling.choose(task.head, params, generator)  # (1,)
        yield int(chosen[0])
        if position + 1 < end:
            with torch.inference_mode():
                params, state = step(chosen, position, state)
