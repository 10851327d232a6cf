"""Writing a token model as a Hugging Face model directory (the part of ``lintf export`` after the checkpoint).

The directory holds ``config.json`` (``model_type: lintf``: the encoder's settings, positions, the
vocabulary size), ``model.safetensors``, ``generation_config.json`` and, for a text model, its
tokenizer. ``AutoModelForCausalLM.from_pretrained(DIR)`` reads it once ``lintf`` is imported, and
``lintf fit --model.init_from DIR`` trains on from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lintf.hf.settings import CONFIG_NAMES, model_weights, task_settings

if TYPE_CHECKING:
    from lintf.data.tokenizers import Tokenizer


def write_directory(task: Any, tokenizer: Tokenizer | None, output: str) -> None:
    """Write ``task``'s model (and ``tokenizer``) as a Hugging Face directory at ``output``.

    Args:
        task: an ``AutoregressiveTask`` whose head gives logits (categorical).
        tokenizer: the text model's tokenizer; None for models of symbols or bytes.
        output: the directory to write (created).

    Raises:
        ValueError: the head's parameters are not logits (what transformers samples from).
    """
    from lintf.hf.configuration import LintfConfig
    from lintf.hf.modeling import DIRECTORY_HEADS, LintfForCausalLM
    from lintf.hf.tokenization import save_tokenizer

    settings = task_settings(task)
    if settings["head"] not in DIRECTORY_HEADS:
        raise ValueError(
            f"this {type(task).__name__} has a {settings['head']!r} head, whose parameters are not logits over the "
            f"vocabulary, and transformers' generate and pipeline choose tokens from logits; lintf export writes "
            f"models with a {' or '.join(DIRECTORY_HEADS)} head (train one with --model.head categorical)")
    config = LintfConfig(**{CONFIG_NAMES.get(key, key): value for key, value in settings.items()},
                         task=type(task).__name__)
    model = LintfForCausalLM(config)
    model.load_state_dict(model_weights(task))  # strict: the same modules under the same names
    model.eval().save_pretrained(output)
    if tokenizer is not None:
        save_tokenizer(tokenizer, output)
