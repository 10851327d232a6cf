"""Extensions: installed packages that add subcommands and checkpoint upgrades to ``lintf``.

lintf's example tasks beyond the core are extensions too. An extension declares an entry point in
the group ``lintf.extensions``; its value is a callable, called with no arguments, or a module,
either of which registers what the extension adds::

    # pyproject.toml
    [project.entry-points."lintf.extensions"]
    mytask = "mytask.extension:register"

    # mytask/extension.py: imports nothing heavy, names its commands by import path
    from lintf.run.checkpoint_format import FormatUpgrade, register_format_upgrade
    from lintf.run.commands import Command, register_command

    def register() -> None:
        register_command(Command("mytask", "one line for lintf --help", "mytask.commands:COMMANDS"))
        register_format_upgrade(FormatUpgrade(renamed_tasks={"mytask.old.Task": "mytask.task.Task"}))

Extensions are loaded on first need (``lintf --help``, one of their subcommands, a checkpoint in an
older format), never for a fit, validate, test or predict run on a current checkpoint. A task's
decoding options need no registration: the task names its ``decoding_class``.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, distributions

ENTRY_POINT_GROUP = "lintf.extensions"
_loaded: list[str] | None = None


class ExtensionError(ImportError):
    """An extension failed to load; the message names it and the package that installed it."""


def extension_entry_points() -> list[EntryPoint]:
    """The ``lintf.extensions`` entry points of the installed distributions.

    Every copy of a distribution's metadata on ``sys.path`` is read (``entry_points()`` reads the first
    only), so that a stale ``*.egg-info`` left in a source checkout by an earlier build does not hide the
    entry points of the installed copy.
    """
    found: dict[tuple[str, str], EntryPoint] = {}
    for distribution in distributions():
        for entry_point in distribution.entry_points:
            if entry_point.group == ENTRY_POINT_GROUP:
                found.setdefault((entry_point.name, entry_point.value), entry_point)
    return list(found.values())


def load_extensions() -> list[str]:
    """Load every installed ``lintf.extensions`` entry point, once per process.

    Returns:
        the names of the loaded entry points.

    Raises:
        ExtensionError: an extension failed to import or to register.
    """
    global _loaded
    if _loaded is not None:
        return list(_loaded)
    _loaded = []  # before loading: a registration that asks for the commands does not load them again
    for entry_point in extension_entry_points():
        try:
            target = entry_point.load()
            if callable(target):
                target()
        except Exception as error:
            package = getattr(entry_point.dist, "name", "an unknown distribution")
            raise ExtensionError(
                f"lintf extension {entry_point.name!r} ({entry_point.value}, installed by {package}) failed to load: "
                f"{type(error).__name__}: {error}. Fix or uninstall {package}."
            ) from error
        _loaded.append(entry_point.name)
    return list(_loaded)
