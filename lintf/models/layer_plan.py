"""Per-layer choices of an encoder stack: one value for every layer, one per layer, or a repeated pattern.

A hybrid stack names one attention per layer (``[gated_delta_net, gated_delta_net, gated_delta_net,
local]`` for four layers) or a pattern that repeats to ``n_layers`` (the same list for eight layers).
Options follow the names: one mapping for every layer of a single attention, a list (one entry per
layer or per pattern entry) or a mapping keyed by attention name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from lintf.registry import Registry, UnknownNameError

T = TypeVar("T")
Options = dict[str, Any]


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def expand_pattern(entries: Sequence[T], n_layers: int, what: str) -> list[T]:
    """``entries`` repeated to ``n_layers`` entries; ValueError unless its length divides ``n_layers``.

    Args:
        entries: one entry per layer, or a pattern of them.
        n_layers: the stack's depth.
        what: the config key, for messages (``encoder.attention``).
    """
    if len(entries) == 0:
        raise ValueError(f"{what} is an empty list; give one entry, one per layer ({n_layers}) or a pattern")
    if n_layers % len(entries):
        raise ValueError(
            f"{what} has {len(entries)} entries for n_layers {n_layers}: give one per layer ({n_layers}) or a "
            f"pattern repeated to n_layers, whose length divides it ({_divisors(n_layers)})"
        )
    return list(entries) * (n_layers // len(entries))


def resolve_names(registry: Registry, value: str | Sequence[str], what: str) -> str | list[str]:
    """``value`` (a name, a class path, or a list of them) as registry names; unknown ones are refused.

    Raises:
        UnknownNameError (a KeyError) for an unknown name, listing the known ones; ValueError for a
        class path that is not registered.
    """
    if isinstance(value, str):
        return _resolve_one(registry, value, what)
    if not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a {registry.kind} name or a list of them, got {type(value).__name__}")
    return [_resolve_one(registry, entry, f"{what}[{index}]") for index, entry in enumerate(value)]


def _resolve_one(registry: Registry, name: object, what: str) -> str:
    # A class path names a class registered already: a config (or a checkpoint's, or a model directory's)
    # never imports a module, whose import could run code.
    if isinstance(name, str) and "." in name:
        registered = _registered_class_path(registry, name)
        if registered is not None:
            return registered
    if not isinstance(name, str) or name not in registry:
        raise UnknownNameError(f"{what}: unknown {registry.kind} {name!r}; known {registry.kind} names: "
                               f"{', '.join(registry.names())} (a class path must name a registered class "
                               "whose module is imported)")
    return str(name)


def _registered_class_path(registry: Registry, path: str) -> str | None:
    """The registry name of the registered class at dotted ``path``, None if none is."""
    for name in registry.names():
        cls = registry.get(name)
        if f"{cls.__module__}.{cls.__qualname__}" == path:
            return name
    return None


def options_per_layer(
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
    names: str | Sequence[str],
    n_layers: int,
    what: str,
) -> list[Options]:
    """The options of each layer from a config's per-entry ``options`` for the entries ``names``.

    Args:
        options: None (no options); one mapping (every layer, when ``names`` is one name); a mapping
            keyed by name (when ``names`` is a list); or a list, one entry per layer or a pattern.
        names: the config's name or list of names (``encoder.attention``).
        n_layers: the stack's depth.
        what: the config key of the options, for messages (``encoder.attention_kwargs``).
    """
    if options is None:
        return [{} for _ in range(n_layers)]
    if isinstance(options, Mapping) and isinstance(names, str):
        return [dict(options) for _ in range(n_layers)]
    if isinstance(options, Mapping):
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(
                f"{what}: with a list of names, a mapping of options is keyed by name, but {', '.join(unknown)} "
                f"is not among them ({', '.join(dict.fromkeys(names))}); or give a list, one entry per layer"
            )
        layer_names = expand_pattern(names, n_layers, what)
        return [_mapping(options.get(name), f"{what}.{name}") for name in layer_names]
    if isinstance(options, Sequence) and not isinstance(options, str):
        entries = expand_pattern(options, n_layers, what)
        return [_mapping(entry, f"{what}[{index % len(options)}]") for index, entry in enumerate(entries)]
    raise ValueError(f"{what} must be a mapping, a list of mappings or null, got {type(options).__name__}")


def _mapping(entry: Any, what: str) -> Options:
    if entry is None:
        return {}
    if not isinstance(entry, Mapping):
        raise ValueError(f"{what} must be a mapping of options or null, got {entry!r}")
    return dict(entry)
