"""``LintfConfig``: the ``config.json`` of a lintf token model (``model_type: lintf``).

Every field is plain data: the encoder is ``EncoderConfig.to_dict()`` whole (hybrid stacks and
attention options included), and attentions, feature maps and heads are registry names, which
loading looks up and never imports.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedConfig

from lintf.hf.settings import CONFIG_NAMES, MODEL_TYPE, SETTING_KEYS


class LintfConfig(PreTrainedConfig):
    """A lintf token model: token embedding + positions -> causal encoder -> categorical head.

    Args:
        vocab_size: token ids.
        max_positions: positions the position codes cover (any length with positions "none"); the task's
            ``max_length``, named otherwise because ``generate`` reads a config's ``max_length`` as its own.
        encoder: the encoder's settings, ``EncoderConfig.to_dict()``.
        positions: "learned", "sinusoidal", "raster" or "none".
        row_bytes: positions per row of "raster" positions.
        head: output-head registry name; "categorical" (logits) for a directory.
        head_kwargs: extra arguments of the head.
        task: the lintf task that trained the model (its class name, for the reader).
        use_cache: ``generate`` carries each layer's attention state (``LintfCache``).
    """

    model_type = MODEL_TYPE

    vocab_size: int = 256
    max_positions: int = 1
    encoder: dict[str, Any] | None = None
    positions: str = "none"
    row_bytes: int | None = None
    head: str = "categorical"
    head_kwargs: dict[str, Any] | None = None
    task: str | None = None
    use_cache: bool = True

    def settings(self) -> dict[str, Any]:
        """The arguments that build the model's modules (``lintf.hf.settings.SETTING_KEYS``)."""
        return {key: getattr(self, CONFIG_NAMES.get(key, key)) for key in SETTING_KEYS}
