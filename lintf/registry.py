"""Name -> class registries for attentions and feature maps.

A class becomes available by decorating it::

    @register_feature_map("elu")
    class EluFeatureMap(FeatureMap): ...

Importing ``lintf`` registers every built-in; plugins register theirs the same way, and the
installed ones (entry-point group ``lintf.plugins``) are imported at the first lookup (``get``,
``names``, ``in``, ``list_*``, ``build_*``), so their names are there for Python code too: importing
``lintf`` hands the plugin loader to ``run_before_lookups``. The registry is the floor every
registered class stands on, so it imports no other lintf module; the plugins sit above it.
``build_*`` checks keyword arguments against the class signature before calling it, so a typo
in a config names the class and the arguments it accepts instead of a bare TypeError.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")

_before_lookup: list[Callable[[], object]] = []


def run_before_lookups(loader: Callable[[], object]) -> None:
    """Have every registry call ``loader`` before each lookup (``get``, ``names``, ``in``).

    Args:
        loader: called with no arguments before every lookup, so it must be cheap after its first call
            (``lintf`` passes ``lintf.plugins.load_entry_point_plugins``, which imports the installed plugins once).
    """
    if loader not in _before_lookup:
        _before_lookup.append(loader)


def _prepare_lookup() -> None:
    for loader in _before_lookup:
        loader()


class UnknownNameError(KeyError):
    """A registry lookup for a name nobody registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class UnknownArgumentError(TypeError, ValueError):
    """Keyword arguments that the registered class does not accept."""


class Registry(Generic[T]):
    """Maps names to classes of one kind (attention, feature map, ...).

    Args:
        kind: what the entries are, used in error messages ("attention").
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str, *, override: bool = False) -> Callable[[type[T]], type[T]]:
        """Class decorator registering ``cls`` under ``name``.

        Args:
            name: registry key; must be a non-empty string.
            override: replace an existing entry instead of raising.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")

        def decorator(cls: type[T]) -> type[T]:
            taken = self._classes.get(name)
            if taken is not None and taken is not cls and not override:
                raise ValueError(
                    f"{self.kind} name {name!r} is already registered to "
                    f"{taken.__module__}.{taken.__qualname__}; pass override=True to replace it"
                )
            self._classes[name] = cls
            cls.registry_name = name  # type: ignore[attr-defined]
            return cls

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` (raises UnknownNameError if absent)."""
        self.get(name)
        del self._classes[name]

    def names(self) -> list[str]:
        """Sorted registered names."""
        _prepare_lookup()
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        _prepare_lookup()
        return name in self._classes

    def get(self, name: str) -> type[T]:
        """The class registered under ``name``; raises UnknownNameError listing known names."""
        _prepare_lookup()
        try:
            return self._classes[name]
        except (KeyError, TypeError):
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known {self.kind} names: {', '.join(self.names())}"
            ) from None

    def build(self, name: str, *args: Any, **kwargs: Any) -> T:
        """Instantiate the class registered under ``name`` after checking its keyword arguments."""
        cls = self.get(name)
        check_kwargs(cls, kwargs, what=f"{self.kind} {name!r}")
        return cls(*args, **kwargs)


def accepted_arguments(cls: type) -> list[str]:
    """Keyword arguments accepted by ``cls.__init__`` (empty if it takes **kwargs)."""
    parameters = inspect.signature(cls.__init__).parameters
    return [
        p.name
        for p in list(parameters.values())[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]


def check_kwargs(cls: type, kwargs: dict[str, Any], what: str) -> None:
    """Raise UnknownArgumentError naming ``cls`` and its arguments for a kwarg it does not take."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = accepted_arguments(cls)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise UnknownArgumentError(
            f"{what} ({cls.__module__}.{cls.__qualname__}) got unknown argument(s) "
            f"{', '.join(unknown)}; it accepts: {', '.join(accepted) or 'no arguments'}"
        )
    for parameter in parameters:  # YAML reads `maybe` as a string, which any truth test would take as True
        value = kwargs.get(parameter.name)
        if parameter.annotation in (bool, "bool") and parameter.name in kwargs and not isinstance(value, bool):
            raise ValueError(f"{what} argument {parameter.name} is true or false, got {value!r} "
                             f"({type(value).__name__})")


ATTENTIONS: Registry[Any] = Registry("attention")
FEATURE_MAPS: Registry[Any] = Registry("feature map")
HEADS: Registry[Any] = Registry("output head")
LAYERS: Registry[Any] = Registry("layer recipe")
"""Layer recipes by the attention name they serve (``encoder.layer: recipe``): ``lintf.layers``."""


def register_attention(name: str, *, override: bool = False) -> Callable[[type[T]], type[T]]:
    """Class decorator adding an attention implementation under ``name``."""
    return ATTENTIONS.register(name, override=override)


def register_feature_map(name: str, *, override: bool = False) -> Callable[[type[T]], type[T]]:
    """Class decorator adding a feature map (phi) under ``name``."""
    return FEATURE_MAPS.register(name, override=override)


def register_layer(name: str, *, override: bool = False) -> Callable[[type[T]], type[T]]:
    """Class decorator adding the layer recipe of attention ``name`` (projections, convolutions, gates, norm)."""
    return LAYERS.register(name, override=override)


def list_layers() -> list[str]:
    """Sorted names of the attentions that have a layer recipe."""
    return LAYERS.names()


def list_attentions() -> list[str]:
    """Sorted names of every registered attention."""
    return ATTENTIONS.names()


def list_feature_maps() -> list[str]:
    """Sorted names of every registered feature map."""
    return FEATURE_MAPS.names()


def build_attention(name: str, **kwargs: Any) -> Any:
    """Instantiate the attention registered as ``name`` (see its class for the arguments)."""
    return ATTENTIONS.build(name, **kwargs)


def build_feature_map(name: str, dim: int, **kwargs: Any) -> Any:
    """Instantiate the feature map ``name`` for inputs of size ``dim``."""
    return FEATURE_MAPS.build(name, dim, **kwargs)


def register_head(name: str, *, override: bool = False) -> Callable[[type[T]], type[T]]:
    """Class decorator adding an output head (a distribution over byte values) under ``name``."""
    return HEADS.register(name, override=override)


def list_heads() -> list[str]:
    """Sorted names of every registered output head."""
    return HEADS.names()


def build_head(name: str, d_model: int, **kwargs: Any) -> Any:
    """Instantiate the output head ``name`` reading hidden states of size ``d_model``."""
    return HEADS.build(name, d_model, **kwargs)
