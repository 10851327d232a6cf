"""lintf: linear transformers (Katharopoulos et al. 2020) on PyTorch Lightning.

Importing the package registers every built-in attention and feature map. ``lintf.load(CKPT)`` reads a
checkpoint as a model that generates (``lintf.generation.pretrained``), imported on first use.
"""

from typing import Any

from lintf import attention as _attention  # noqa: F401  (registers built-in attentions)
from lintf import feature_maps as _feature_maps  # noqa: F401  (registers built-in feature maps)
from lintf import heads as _heads  # noqa: F401  (registers built-in output heads)
from lintf.registry import (
    build_attention,
    build_feature_map,
    build_head,
    list_attentions,
    list_feature_maps,
    list_heads,
    register_attention,
    register_feature_map,
    register_head,
)

__version__ = "0.1.0"



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
    "register_attention",
    "register_feature_map",
    "register_head",
]
