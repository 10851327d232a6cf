"""``lintf.load(CKPT)``: a checkpoint as a Python object that generates, as ``from_pretrained(...).generate()``.

    model = lintf.load("lightning_logs/stream_lm-linear-kjv/version_0/checkpoints/best.ckpt")  # or "last" / "best"
    print(model.generate("Once upon a time", max_new_tokens=100, temperature=0.8))

The checkpoint is found, vetted and rebuilt as ``lintf generate`` does (never running code from the file);
``model.task`` is the LightningModule in eval mode, ``model.tokenizer`` turns text into ids and back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lintf.generation.checkpoint import build_task, find_generating_checkpoint
from lintf.generation.command import new_token_count
from lintf.generation.prompts import ByteFormat, ModelSettings, PromptFormat, SymbolFormat, prompt_format
from lintf.generation.streaming import stream_tokens
from lintf.plugins import load_plugins
from lintf.run.run_config import require_run_plugins
from lintf.sampling import Sampling
from lintf.tasks.autoregressive import AutoregressiveTask


class Pretrained:
    """An autoregressive task read from a checkpoint, with its tokenizer.

    Args:
        task: the task, in eval mode.
        tokenizer: the prompt format of its checkpoint (text, copy symbols or image bytes).
        path: the checkpoint file it was read from.
        settings: what the checkpoint says about the model's inputs (positions, vocabulary).
    """

    def __init__(self, task: AutoregressiveTask, tokenizer: PromptFormat, path: str, settings: ModelSettings) -> None:
        self.task, self.tokenizer, self.path, self.settings = task, tokenizer, path, settings

    def __repr__(self) -> str:
        return f"Pretrained({type(self.task).__name__} from {self.path})"

    def generate(self, prompt: str, max_new_tokens: int | None = None, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float = 1.0, seed: int = 0) -> str:
        """The prompt and its continuation, as text; the options and defaults are ``lintf generate``'s.

        Args:
            prompt: the text to continue (a copy model: symbols such as '3 1 4').
            max_new_tokens: tokens to generate (default: 200 for text, the prompt's length for a copy).
            temperature: 0 picks the most likely token; above 0 samples, sharper below 1.
            top_k: sample only among the k most likely tokens (default: all).
            top_p: sample only among the most likely tokens that hold this share of probability (0, 1].
            seed: seed of the random choices.
        """
        if isinstance(self.tokenizer, ByteFormat):
            raise ValueError(f"{self.path} is an image model: `lintf generate --ckpt_path {self.path}` writes its "
                             "samples as a PNG grid")
        ids = self.tokenizer.encode(prompt)
        if not ids:
            raise ValueError(f"the prompt {prompt!r} is empty; give at least one token")
        count = new_token_count(self.settings, self.tokenizer, ids, max_new_tokens)
        generator = torch.Generator(device=self.task.device).manual_seed(seed)
        new = list(stream_tokens(self.task, ids, count, Sampling(temperature, top_k, top_p), generator))
        text = self.tokenizer.piece(ids + new) or ""
        return text.rstrip(" ") if isinstance(self.tokenizer, SymbolFormat) else text  # symbols end in a space


def load(ckpt_path: str, root: str = ".", plugins: Sequence[str] = ()) -> Pretrained:
    """The autoregressive model of a checkpoint, with its tokenizer and a ``generate(prompt, ...)`` method.

    Args:
        ckpt_path: a .ckpt file, or 'last' / 'best': the newest of an autoregressive task under ``root``.
        root: directory searched for 'last' and 'best'.
        plugins: local plugins (modules or .py files) the checkpoint's run was trained with.
    """
    load_plugins(plugins)
    path, checkpoint, task_class = find_generating_checkpoint(ckpt_path, root)
    require_run_plugins(path, list(plugins))
    settings = ModelSettings.of(task_class, checkpoint)
    fmt = prompt_format(task_class, settings, checkpoint)
    return Pretrained(build_task(path, checkpoint, task_class), fmt, path, settings)
