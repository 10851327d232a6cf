"""lintf: linear transformers (Katharopoulos et al. 2020) on PyTorch Lightning.

Importing the package registers every built-in attention and feature map, has the registries
import the installed plugins (entry-point group ``lintf.plugins``) at their first lookup, and
registers lintf's model, config and tokenizer with ``transformers``' Auto classes once
``transformers`` is imported (``lintf.hf``). ``lintf.load(CKPT)`` reads a checkpoint as a model that
generates (``lintf.generation.pretrained``), imported on first use.
"""

from typing import Any

from lintf import attention as _attention  # noqa: F401  (registers built-in attentions)
from lintf import feature_maps as _feature_maps  # noqa: F401  (registers built-in feature maps)
from lintf import heads as _heads  # noqa: F401  (registers built-in output heads)
from lintf import layers as _layers  # noqa: F401  (registers built-in layer recipes)
from lintf.hf.registration import register_when_imported
from lintf.plugins import load_entry_point_plugins
from lintf.registry import (
    build_attention,
    build_feature_map,
    build_head,
    list_attentions,
    list_feature_maps,
    list_heads,
    list_layers,
    register_attention,
    register_feature_map,
    register_head,
    run_before_lookups,
)

run_before_lookups(load_entry_point_plugins)

__version__ = "0.1.0"

register_when_imported()


def __getattr__(name: str) -> Any:
    if name == "load":  # the generation and run modules load only when asked for: `import lintf` stays light
        from lintf.generation.pretrained import load

        return load
    raise AttributeError(f"module 'lintf' has no attribute {name!r}")


__all__ = [
    "build_attention",
    "build_feature_map",
    "build_head",
    "load",
    "list_attentions",
    "list_feature_maps",
    "list_heads",
    "list_layers",
    "register_attention",
    "register_feature_map",
    "register_head",
]
