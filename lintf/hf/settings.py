"""A token model's settings and weights as a Hugging Face directory stores them: plain data and tensors.

The settings are the arguments that shape an ``AutoregressiveTask``'s modules (vocabulary, positions,
the encoder as ``EncoderConfig.to_dict()``, the head); the weights are those of its modules alone
(embedding, positions, encoder, head), under the names the task gives them, so a directory's
``model.safetensors`` loads into the task and into ``LintfForCausalLM`` alike.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
BPE_TOKENIZER_FILE = "tokenizer.json"
LINTF_TOKENIZER_FILE = "lintf_tokenizer.json"
"""The char and bytes tokenizers, as lintf stores them (``Tokenizer.to_dict()``)."""
MODEL_TYPE = "lintf"
MODEL_PARTS = ("token_embedding", "positions", "encoder", "head")
"""The task's submodules that make the model; metrics and the rest stay out of a directory."""
SETTING_KEYS = ("vocab_size", "max_length", "encoder", "positions", "row_bytes", "head", "head_kwargs")
"""The config.json entries that rebuild the modules, in ``AutoregressiveTask``'s argument names."""
CONFIG_NAMES = {"max_length": "max_positions"}
"""Settings stored under another name in config.json (setting -> field): ``generate`` reads a config's
``max_length`` as its own limit on the tokens of a sequence."""


def task_settings(task: Any) -> dict[str, Any]:
    """The settings of an ``AutoregressiveTask``'s modules as plain data (``SETTING_KEYS``).

    Args:
        task: the task (its hyper-parameters and encoder config are read).
    """
    hparams = task.hparams
    return {
        "vocab_size": int(hparams["vocab_size"]),
        "max_length": int(hparams["max_length"]),
        "encoder": task.encoder_config.to_dict(),
        "positions": str(hparams.get("positions", "learned")),
        "row_bytes": hparams.get("row_bytes"),
        "head": str(hparams.get("head", "categorical")),  # tasks that fix their head (text) do not list it
        "head_kwargs": dict(hparams.get("head_kwargs") or {}) or None,
    }


def model_weights(module: Any) -> dict[str, Tensor]:
    """The weights of ``module``'s model parts (``MODEL_PARTS``), by their names in its state dict."""
    return {key: value for key, value in module.state_dict().items() if key.split(".", 1)[0] in MODEL_PARTS}
