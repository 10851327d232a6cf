"""Tiny token models exported as Hugging Face directories, for the tests of ``lintf.hf``."""

from __future__ import annotations

from pathlib import Path

import torch

from lintf.data.tokenizers import CharTokenizer
from lintf.generation import Sampling, complete
from lintf.models import EncoderConfig
from lintf.tasks import AutoregressiveTask, StreamLanguageModelTask

TEXT = "in the beginning was the word, and the word was with god.\n"


def tiny_encoder(attention: str = "linear", **options) -> EncoderConfig:
    return EncoderConfig(**{"d_model": 16, "n_layers": 2, "n_heads": 2, "dropout": 0.0, **options}, attention=attention)


def token_task(attention: str, vocab_size: int = 13, max_length: int = 24) -> AutoregressiveTask:
    """A seeded causal token model with learned positions (so positions must follow the cache)."""
    torch.manual_seed(0)
    return AutoregressiveTask(vocab_size, max_length, tiny_encoder(attention), positions="learned").eval()


def text_task(attention: str = "linear") -> tuple[StreamLanguageModelTask, CharTokenizer]:
    tokenizer = CharTokenizer(TEXT)
    torch.manual_seed(0)
    task = StreamLanguageModelTask(tokenizer.vocab_size, 64, tiny_encoder(attention), between_segments="reset")
    return task.eval(), tokenizer


def lintf_greedy(task: AutoregressiveTask, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """lintf's own greedy continuation (``lintf generate --temperature 0``'s loop): (B, P + new_tokens)."""
    tokens = torch.zeros(prompt.shape[0], prompt.shape[1] + new_tokens, dtype=torch.long)
    tokens[:, : prompt.shape[1]] = prompt
    return complete(task, tokens, prompt.shape[1], Sampling(temperature=0))


def export(task, tokenizer, directory: Path) -> Path:
    from lintf.hf.export import write_directory

    write_directory(task, tokenizer, str(directory))
    return directory
