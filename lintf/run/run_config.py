"""The run of a checkpoint supplies what a command would otherwise ask again: its config and its plugins.

Every ``fit`` saves its settings as ``config.yaml`` in the run directory, beside ``checkpoints/``. So
``lintf test --ckpt_path last`` (or ``validate``, ``predict``) without ``--config`` reads the config of
the checkpoint's run, as ``lintf generate`` needs none. A run trained with local plugins
(``--plugins my_fm.py``) records them there; a command that loads its checkpoint without them is
refused with the ``--plugins`` flag that loads them (a plugin runs code: lintf never imports one on
its own).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from lintf.layout.directories import CONFIG_FILE, run_directory_of
from lintf.plugins import PluginError
from lintf.run.config_files import ConfigFileError, option_values, read_config_file
from lintf.run.plugin_flags import plugins_in_args

EVALUATING = ("validate", "test", "predict")
ALIASES = {"last": "last.ckpt", "best": "best.ckpt"}


def run_checkpoint(ckpt_path: str, root: str) -> str | None:
    """The checkpoint ``ckpt_path`` names (a file, or 'last' / 'best': the newest in a run under ``root``), if it
    belongs to a run directory; else None."""
    if ckpt_path not in ALIASES:
        return ckpt_path if os.path.isfile(ckpt_path) and run_directory_of(ckpt_path) else None
    from lintf.run.checkpoint_search import find_checkpoints

    return next((path for path in find_checkpoints([root], ALIASES[ckpt_path]) if run_directory_of(path)), None)


def run_plugins(checkpoint_path: str) -> list[str]:
    """The local plugins the run of ``checkpoint_path`` was trained with (its config.yaml's ``plugins``)."""
    run = run_directory_of(checkpoint_path)
    if run is None:
        return []
    try:
        plugins = read_config_file(os.path.join(run, CONFIG_FILE)).get("plugins") or []
    except ConfigFileError:
        return []
    return [str(plugin) for plugin in ([plugins] if isinstance(plugins, str) else plugins)]


def require_run_plugins(checkpoint_path: str, loaded: Sequence[str]) -> None:
    """PluginError naming the plugins the run of ``checkpoint_path`` used that ``loaded`` lacks.

    Args:
        checkpoint_path: the checkpoint a command loads.
        loaded: the ``--plugins`` of the command line.
    """
    missing = [plugin for plugin in run_plugins(checkpoint_path) if plugin not in loaded]
    if missing:
        flag = " ".join(f"--plugins {plugin}" for plugin in missing)
        raise PluginError(
            f"checkpoint {checkpoint_path} was trained with the plugin{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} (its run's {CONFIG_FILE}), which this command has not loaded: its model needs "
            f"what they register. A plugin runs code, so lintf loads one only when asked: add {flag}"
        )


def with_run_config(argv: list[str]) -> list[str]:
    """``argv`` with the run's config added where a command loads a run's checkpoint without a config.

    For ``fit``, ``validate``, ``test`` and ``predict`` with ``--ckpt_path``: the plugins of the checkpoint's
    run must be on the command line (``require_run_plugins``). For validate/test/predict without ``--config``
    or ``--model``, ``--config <run>/config.yaml`` is added and 'last' / 'best' become the file they name; a
    checkpoint file in no run directory needs ``--config`` (ConfigFileError).
    """
    if not argv or argv[0] not in ("fit", *EVALUATING):
        return argv
    given = dict(option_values(argv, "--ckpt_path"))
    ckpt_path = given.get("--ckpt_path")
    if not ckpt_path:
        return argv
    options = dict(option_values(argv, "--config", "-c", "--model", "--trainer.default_root_dir"))
    configured = argv[0] == "fit" or any(key in options for key in ("--config", "-c", "--model"))
    if configured and ckpt_path in ALIASES:
        return argv  # the config says which experiment's 'last' is meant: the CLI finds it
    path = run_checkpoint(ckpt_path, options.get("--trainer.default_root_dir") or os.getcwd())
    if path is None and not configured and ckpt_path not in ALIASES and os.path.isfile(ckpt_path):
        raise ConfigFileError(
            f"checkpoint {ckpt_path} is in no run directory (a run keeps its {CONFIG_FILE} beside its checkpoints/ "
            f"folder), so the settings of its task and data are not known: give the config it was trained with, "
            f"lintf {argv[0]} --config CONFIG --ckpt_path {ckpt_path} (its outputs go to a new run directory, "
            "lightning_logs/<task>-<attention>[-<data>]/version_N).")
    if path is None:
        return argv
    require_run_plugins(path, plugins_in_args(argv))
    if configured:
        return argv
    config = os.path.join(run_directory_of(path), CONFIG_FILE)
    print(f"lintf: settings from {config} (the run of {path})", file=sys.stderr, flush=True)
    rest = list(argv[1:])
    for index, arg in enumerate(rest):
        if arg == "--ckpt_path" and index + 1 < len(rest):
            rest[index + 1] = path
        elif arg.startswith("--ckpt_path="):
            rest[index] = f"--ckpt_path={path}"
    return [argv[0], "--config", config, *rest]
