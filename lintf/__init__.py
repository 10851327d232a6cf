"""lintf: linear transformers (Katharopoulos et al. 2020) on PyTorch Lightning.

Importing the package registers every built-in attention and feature map, has the registries
import the installed plugins (entry-point group ``lintf.plugins``) at their first lookup, and
registers lintf's model, config and tokenizer with ``transformers``' Auto classes once
``transformers`` is imported (``lintf.hf``).
"""

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

__all__ = [
    "build_attention",
    "build_feature_map",
    "build_head",
    "list_attentions",
    "list_feature_maps",
    "list_heads",
    "list_layers",
    "register_attention",
    "register_feature_map",
    "register_head",
]
