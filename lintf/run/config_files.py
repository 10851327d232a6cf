"""What ``lintf`` reads from the raw command line before its parser exists: YAML config files, batch limits.

Plugins must be imported before the parser is built (their names are validated while parsing), so
the ``plugins`` keys of ``--config`` files are read here first; a config file that is not valid
YAML or not UTF-8 is reported here, in one paragraph naming the file, line and fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml


class ConfigFileError(ValueError):
    """A ``--config`` file that cannot be read as YAML."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping of a YAML file that names one key twice (YAML itself would keep the last value silently)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping, naming both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKeyError(f"sets {key!r} twice, on lines {seen[key]} and {line}: YAML would keep the "
                                        "last one silently. Keep one of them.")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in YAML file ``path``; ConfigFileError naming the file, line and column otherwise."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"config file {path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                              f"{error.start}); save it as UTF-8") from None
    except OSError as error:
        raise ConfigFileError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        config = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader: plain data only)
    except DuplicateKeyError as error:
        raise ConfigFileError(f"config file {path} {error}") from None
    except yaml.YAMLError as error:
        raise ConfigFileError(describe_yaml_error(path, text, error)) from None
    if config is None:
        raise ConfigFileError(f"config file {path} is empty (or only comments): it sets no option. Write the options "
                              "to set (model:, data:, trainer:, ...), or leave out --config " + str(path))
    if not isinstance(config, dict):
        raise ConfigFileError(f"config file {path} holds a {type(config).__name__}, not a mapping of options "
                              "(model:, data:, trainer:, ...)")
    return config


def describe_yaml_error(path: Path, text: str, error: yaml.YAMLError) -> str:
    """One paragraph: where the YAML broke, what the parser said, and the usual fix."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
    hint = " YAML indents with spaces, never tabs." if "\t" in line or "'\\t'" in problem else ""
    shown = f" (the line reads: {line.strip()!r})" if line.strip() else ""
    return f"config file {where} is not valid YAML: {problem}{shown}.{hint}"


def option_values(args: Sequence[str], *names: str) -> Iterator[tuple[str, str]]:
    """(name, value) of each ``--name value`` / ``--name=value`` in ``args`` whose name is in ``names``."""
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        name, has_value, value = arg.partition("=")
        if name in names:
            yield name, value if has_value else (args[index + 1] if index + 1 < len(args) else "")


def config_files(args: Sequence[str]) -> list[Path]:
    """The ``--config`` files of a command line that exist, in order."""
    return [Path(value) for _, value in option_values(args, "--config", "-c") if Path(value).is_file()]


def integer_batch_limits(args: Sequence[str]) -> dict[str, int]:
    """``trainer.limit_*_batches`` written as whole numbers (``1``, not ``1.0``), in config files or flags.

    Lightning reads an int as a number of batches and a float as a fraction, but its annotation lists
    float first, so the parser turns ``1`` into 1.0 (all batches). Written as ``1`` it means one batch,
    as in Lightning's own API; ``1.0`` still means all of them. Later files and flags win.
    """
    limits: dict[str, int] = {}
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        name, has_value, value = arg.partition("=")
        value = value if has_value else (args[index + 1] if index + 1 < len(args) else "")
        if name in ("--config", "-c") and Path(value).is_file():
            trainer = read_config_file(value).get("trainer") or {}
            for key, limit in (trainer.items() if isinstance(trainer, dict) else ()):
                if is_batch_limit(key):
                    set_limit(limits, key, limit)
        elif name.startswith("--trainer.") and is_batch_limit(name.removeprefix("--trainer.")):
            set_limit(limits, name.removeprefix("--trainer."), int(value) if value.isdigit() else value)
    return limits


def is_batch_limit(key: str) -> bool:
    return key.startswith("limit_") and key.endswith("_batches")


def set_limit(limits: dict[str, int], key: str, value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        limits[key] = value
    else:
        limits.pop(key, None)  # a fraction (or null) written later replaces an earlier whole number
