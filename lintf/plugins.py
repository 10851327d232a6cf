"""Plugins: code that registers extra attentions, feature maps or output heads.

Two sources:

* installed packages exposing an entry point in the group ``lintf.plugins`` (the value is a
  module, or a callable that is called with no arguments), imported once per process at the first
  registry lookup (``lintf.list_feature_maps()``, ``lintf.build_attention(...)``, ...), so Python
  code sees their names as the ``lintf`` command does; ``LINTF_NO_PLUGINS=1`` skips them;
* local modules given on the command line (``--plugins my_attention`` or ``--plugins path/to/p.py``):
  importable module names or paths to ``.py`` files, imported before ``lintf`` parses it
  (``lintf.run.plugin_flags`` reads them from the command line).

A plugin runs code by design, so only the command line (or an installed package) may load one: a
config file is data. The ``plugins`` key is saved with the run's config as a record; a config naming
plugins that are not loaded is refused with the ``--plugins`` flag that would load them, so
``lintf fit --config <run>/config.yaml --plugins my_attention.py`` repeats a run that used one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path

ENTRY_POINT_GROUP = "lintf.plugins"
DISABLE_ENV = "LINTF_NO_PLUGINS"


class PluginError(ImportError):
    """A plugin failed to import; the message names the plugin and how to skip it."""


_loaded: list[str] | None = None
"""Names of the entry-point plugins imported in this process; None until the first lookup imports them."""


def load_entry_point_plugins() -> list[str]:
    """Import every installed ``lintf.plugins`` entry point, once per process (unless LINTF_NO_PLUGINS is set).

    Every registry calls this before a lookup (importing ``lintf`` arranges it); later calls return at once.

    Returns:
        the names of the loaded entry points.

    Raises:
        PluginError: a plugin failed to import; it names the plugin and the package that installed it
            (the next lookup tries again).
    """
    global _loaded
    if os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no"):
        return []
    if _loaded is not None:
        return list(_loaded)
    _loaded = []  # before importing: a plugin that looks a name up while it loads does not load the plugins again
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = entry_point.load()
            if callable(target):
                target()
        except Exception as error:
            _loaded = None
            package = getattr(entry_point.dist, "name", "an unknown distribution")
            raise PluginError(
                f"lintf plugin {entry_point.name!r} ({entry_point.value}, installed by {package}) failed to "
                f"import: {type(error).__name__}: {error}. Fix or uninstall {package}, or set {DISABLE_ENV}=1 to "
                f"start lintf without entry-point plugins."
            ) from error
        _loaded.append(entry_point.name)
    return list(_loaded)


def import_local_plugin(spec: str) -> None:
    """Import ``spec``: a module name importable from the working directory or a ``.py`` path."""
    try:
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"no such file {path}")
            loaded = sys.modules.get(path.stem)
            if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path:
                return  # already imported: importing again would register its classes twice
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            importlib.import_module(spec)
    except Exception as error:
        raise PluginError(
            f"lintf plugin {spec!r} (from the 'plugins' key) failed to import: {type(error).__name__}: {error}. "
            f"'plugins' takes module names importable from {os.getcwd()} or paths to .py files."
        ) from error


def load_plugins(local: Iterable[str] = ()) -> None:
    """Load entry-point plugins, then the local modules ``local``."""
    load_entry_point_plugins()
    for spec in local:
        import_local_plugin(spec)
