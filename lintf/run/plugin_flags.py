"""The ``--plugins`` of a command line, and the plugins its ``--config`` files name.

A plugin runs code by design, so only the command line (or an installed package) loads one; a
config file is data: the ``plugins`` key it saves is a record, and a config naming plugins that are not
loaded is refused with the ``--plugins`` flag that would load them.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from lintf.plugins import PluginError
from lintf.run.config_files import config_files, option_values, read_config_file


def _as_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError:
                raise PluginError(f"--plugins {value!r} is not a YAML list; give module names or .py paths, e.g. "
                                  "--plugins '[my_attention, path/to/plugin.py]'") from None
            return [str(v) for v in value or []]
        return [value]
    return [str(v) for v in value]


def plugins_in_args(args: Sequence[str]) -> list[str]:
    """The ``--plugins`` values of a command line (config files are not read: they never load code).

    The CLI must import plugins before its parser exists (names are validated while parsing),
    so this scans the raw arguments instead of waiting for the parser.
    """
    found: list[str] = []
    for key, value in option_values(args, "--plugins", "--plugins+"):
        found += _as_list(value)
    return list(dict.fromkeys(found))


def plugins_of_config_files(args: Sequence[str]) -> list[str]:
    """The ``plugins`` named by the ``--config`` files of a command line."""
    found = [plugin for path in config_files(args) for plugin in _as_list(read_config_file(path).get("plugins"))]
    return list(dict.fromkeys(found))


def check_config_plugins(args: Sequence[str]) -> None:
    """PluginError if a ``--config`` file names plugins that the command line does not load.

    Args:
        args: the raw command line.
    """
    loaded = plugins_in_args(args)
    missing = [plugin for plugin in plugins_of_config_files(args) if plugin not in loaded]
    if missing:
        flag = " ".join(f"--plugins {plugin}" for plugin in missing)
        raise PluginError(
            f"the config names plugins {', '.join(missing)}, which are not loaded: a plugin runs code, so lintf loads "
            f"one only from the command line (or an installed package), never from a config file. If you trust it, "
            f"add {flag}"
        )
