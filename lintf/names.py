"""Config types for registry names, checked while the command line / YAML is parsed.

A task annotates ``attention: AttentionName``; jsonargparse then rejects an unknown name before
any object is built, with the registered names listed. A dotted path to a registered class
(``lintf.attention.ReformerAttention``) is accepted too and stored as its registry name.
"""

from __future__ import annotations

import importlib

from jsonargparse.typing import register_type

from lintf.registry import ATTENTIONS, FEATURE_MAPS, HEADS, Registry


class AttentionName(str):
    """Name of a registered attention (``lintf.list_attentions()``) or a dotted path to its class."""


class FeatureMapName(str):
    """Name of a registered feature map (``lintf.list_feature_maps()``) or a dotted path to its class."""


class HeadName(str):
    """Name of a registered output head (``lintf.list_heads()``) or a dotted path to its class."""


def import_class(path: str) -> type | None:
    """The class (or attribute) named by a dotted path; None if it cannot be imported."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        return None
    try:
        return getattr(importlib.import_module(module_name), attribute, None)
    except ImportError:
        return None


def resolve_name(registry: Registry, value: object) -> str:
    """The registry name for ``value`` (a name or a class path); ValueError listing known names."""
    if isinstance(value, str) and value in registry:
        return value
    known = ", ".join(registry.names())
    if isinstance(value, str) and "." in value:
        cls = import_class(value)
        name = getattr(cls, "registry_name", None)
        if cls is not None and name in registry and registry.get(name) is cls:
            return name
        if cls is not None:
            raise ValueError(
                f"{value!r} is not a registered {registry.kind}; decorate it with @register_{registry.kind.replace(' ', '_')}"
                f"(\"name\") or use a known {registry.kind} name: {known}"
            )
    raise ValueError(f"unknown {registry.kind} {value!r}; known {registry.kind} names: {known}")


register_type(AttentionName, serializer=str, deserializer=lambda v: AttentionName(resolve_name(ATTENTIONS, v)))
register_type(FeatureMapName, serializer=str, deserializer=lambda v: FeatureMapName(resolve_name(FEATURE_MAPS, v)))
register_type(HeadName, serializer=str, deserializer=lambda v: HeadName(resolve_name(HEADS, v)))
