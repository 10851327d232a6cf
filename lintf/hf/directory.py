"""Reading a Hugging Face directory of a lintf model back into lintf: ``--model.init_from DIR``.

Only data is read: ``config.json`` as JSON, ``model.safetensors`` as tensors (never a pickle), the
tokenizer as ``tokenizer.json`` (BPE) or ``lintf_tokenizer.json`` (char, bytes). ``transformers`` is
not needed. A directory whose model differs from the configured task's is refused with the
differences listed, before any weight is copied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from lintf.data.tokenizers import BPETokenizer, Tokenizer, tokenizer_from_dict
from lintf.hf.settings import (BPE_TOKENIZER_FILE, CONFIG_FILE, CONFIG_NAMES, LINTF_TOKENIZER_FILE, MODEL_TYPE,
                                SETTING_KEYS, WEIGHTS_FILE, model_weights)

SHAPE_FREE_SETTINGS = ("max_length",)
"""Settings that may differ where the weights' shapes agree (positions "none" read any length)."""


@dataclass(frozen=True)
class ModelDirectory:
    """What a directory holds for lintf: the model's settings, its weights and its tokenizer (None: none)."""

    path: Path
    settings: dict[str, Any]
    weights: dict[str, Tensor]
    tokenizer: Tokenizer | None


def read_config(path: Path) -> dict[str, Any]:
    """The ``config.json`` of a lintf directory; ValueError if it is missing or of another model."""
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"init_from {str(path)!r} holds no {CONFIG_FILE}: give a directory written by lintf export "
                         "(or save_pretrained of a lintf model)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"init_from {str(path)!r}: {CONFIG_FILE} is not readable JSON ({error})") from None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise ValueError(f"init_from {str(path)!r} holds a model of type {found!r}; lintf starts from directories of "
                         f"model_type {MODEL_TYPE!r}, as lintf export writes them")
    return config


def read_tokenizer(path: Path) -> Tokenizer | None:
    """The directory's tokenizer as lintf's: BPE from ``tokenizer.json``, char or bytes from lintf's own file."""
    if (path / BPE_TOKENIZER_FILE).is_file():
        return BPETokenizer.from_file(str(path / BPE_TOKENIZER_FILE))
    if (path / LINTF_TOKENIZER_FILE).is_file():
        return tokenizer_from_dict(json.loads((path / LINTF_TOKENIZER_FILE).read_text(encoding="utf-8")))
    return None


def read_model_directory(directory: str) -> ModelDirectory:
    """The settings, weights and tokenizer of a lintf model directory; ValueError naming what is wrong.

    Args:
        directory: a directory written by ``lintf export`` or ``save_pretrained``.
    """
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise ValueError(f"init_from {directory!r}: reading a model directory needs safetensors: "
                         'pip install "lintf[hf]"') from None

    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"init_from {directory!r} is not a directory: give one written by lintf export")
    config = read_config(path)
    settings = {key: config.get(CONFIG_NAMES.get(key, key)) for key in SETTING_KEYS}
    if not (path / WEIGHTS_FILE).is_file():
        raise ValueError(f"init_from {directory!r} holds no {WEIGHTS_FILE}; lintf reads weights only from safetensors")
    try:
        weights = load_file(str(path / WEIGHTS_FILE))
    except (OSError, SafetensorError) as error:
        raise ValueError(f"init_from {directory!r}: {WEIGHTS_FILE} is not a safetensors file ({error})") from None
    return ModelDirectory(path, settings, weights, read_tokenizer(path))


def setting_differences(stored: dict[str, Any], own: dict[str, Any], where: str) -> list[str]:
    """'name: stored in <where>, own here' for every setting that differs (the encoder field by field)."""
    differences = []
    for key in SETTING_KEYS:
        if key in SHAPE_FREE_SETTINGS:
            continue
        if key == "encoder" and isinstance(stored.get(key), dict):
            for field in sorted(set(stored[key]) | set(own[key])):
                if stored[key].get(field) != own[key].get(field):
                    differences.append(f"encoder.{field}: {stored[key].get(field)!r} in {where}, "
                                       f"{own[key].get(field)!r} here")
        elif stored.get(key) != own[key]:
            differences.append(f"{key}: {stored.get(key)!r} in {where}, {own[key]!r} here")
    return differences


def weight_differences(stored: dict[str, Tensor], own: dict[str, Tensor], where: str) -> list[str]:
    """The weights missing on either side and those of another shape."""
    differences = [f"{key} missing in {where}" for key in sorted(set(own) - set(stored))]
    differences += [f"{key} in {where} is not a weight of this model" for key in sorted(set(stored) - set(own))]
    differences += [f"{key}: shape {tuple(stored[key].shape)} in {where}, {tuple(own[key].shape)} here"
                    for key in sorted(set(stored) & set(own)) if stored[key].shape != own[key].shape]
    return differences


def start_from_directory(task: nn.Module, own_settings: dict[str, Any], directory: str) -> Tokenizer | None:
    """Copy a directory's weights into ``task``'s model; its tokenizer (None if it holds none).

    Args:
        task: an ``AutoregressiveTask`` just built.
        own_settings: its settings (``lintf.hf.settings.task_settings``).
        directory: the directory of ``--model.init_from``.

    Raises:
        ValueError: the directory is not a lintf model's, or its model differs (every difference listed).
    """
    stored = read_model_directory(directory)
    own = model_weights(task)
    # the weights' shapes follow from the settings: listed only where the settings agree
    differences = (setting_differences(stored.settings, own_settings, directory)
                   or weight_differences(stored.weights, own, directory))
    if differences:
        raise ValueError(f"init_from {directory!r} holds another model than the one configured: "
                         f"{'; '.join(differences[:12])}{' ...' if len(differences) > 12 else ''}. Configure the "
                         "model as the directory's config.json describes it")
    task.load_state_dict(stored.weights, strict=False)  # every model weight is present (checked above)
    return stored.tokenizer
