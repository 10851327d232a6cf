"""A short sample at the end of a text model's ``fit``: what the trained model writes after a validation text.

The model continues the first ``PROMPT_TOKENS`` tokens of the validation text (from its first non-blank line)
with ``NEW_TOKENS`` tokens, sampled at ``lintf generate``'s default temperature from a fixed seed, so two
runs of one config print the same sample and runs of different configs can be read side by side. It takes
about a second at most for the example configs' models on a CPU and stops after ``TIME_LIMIT`` seconds
whatever the model; a failure to sample is one line, never the run's failure.

Tasks that generate text are those with ``prefill``, ``step`` and ``head`` (an autoregressive task)
whose data module has a ``tokenizer`` and ``texts["val"]`` (``TextStreamData``); other runs get no sample.
"""

from __future__ import annotations

import re
import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer

from lintf.sampling import Sampling

PROMPT_TOKENS = 32
NEW_TOKENS = 80
TEMPERATURE = 1.0
"""``lintf generate``'s default temperature (the model's own distribution)."""
SEED = 0
TIME_LIMIT = 2.0
"""Seconds the sample may take; a slower model's sample ends early."""


def text_source(trainer: Trainer, pl_module: LightningModule) -> tuple[Any, str] | None:
    """The tokenizer and validation text of a run whose model generates text; None for any other run."""
    data = trainer.datamodule
    if not all(hasattr(pl_module, name) for name in ("prefill", "step", "head")) or data is None:
        return None
    texts = getattr(data, "texts", None) if hasattr(data, "tokenizer") else None
    text = texts.get("val") if isinstance(texts, dict) else None
    return (data.tokenizer, text) if isinstance(text, str) and text else None


def continuation(pl_module: Any, prompt: list[int], count: int, generator: torch.Generator) -> list[int]:
    """Up to ``count`` token ids sampled after ``prompt``, fewer if ``TIME_LIMIT`` runs out."""
    sampling, chosen_ids, start = Sampling(TEMPERATURE), [], time.perf_counter()
    with torch.inference_mode():
        params, state = pl_module.prefill(torch.tensor([prompt], dtype=torch.long, device=pl_module.device))
        params = params[:, -1]  # (1, P): the distribution of the first new token
        for position in range(len(prompt), len(prompt) + count):
            chosen = sampling.choose(pl_module.head, params, generator)  # (1,)
            chosen_ids.append(int(chosen[0]))
            if len(chosen_ids) == count or time.perf_counter() - start > TIME_LIMIT:
                break
            params, state = pl_module.step(chosen, position, state)
    return chosen_ids


def fit_sample(trainer: Trainer, pl_module: LightningModule) -> str | None:
    """``sample (temperature 1, seed 0): 'prompt' -> 'continuation'``; a one-line note if sampling fails; None for a
    run whose model does not generate text."""
    try:
        source = text_source(trainer, pl_module)
    except Exception as error:  # noqa: BLE001  (a sample never fails the run)
        return f"sample: not drawn ({type(error).__name__}: {error})"
    if source is None:
        return None
    tokenizer, text = source
    training = pl_module.training
    try:
        pl_module.eval()
        start = re.search(r"\n(?=\S)", text[:1000])  # the first line that starts inside the text and is not blank
        line = start.end() if start else 0
        prompt = tokenizer.encode(text[line: line + PROMPT_TOKENS * 16])[:PROMPT_TOKENS]
        generator = torch.Generator(device=pl_module.device).manual_seed(SEED)
        new = continuation(pl_module, prompt, NEW_TOKENS, generator)
        return (f"sample (a validation text's first {len(prompt)} tokens, then {len(new)} sampled at temperature "
                f"{TEMPERATURE:g}, seed {SEED}): {tokenizer.decode(prompt)!r} -> {tokenizer.decode(new)!r}")
    except Exception as error:  # noqa: BLE001  (a sample never fails the run)
        return f"sample: not drawn ({type(error).__name__}: {error})"
    finally:
        pl_module.train(training)
