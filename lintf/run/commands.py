"""The subcommands of ``lintf`` beside fit, validate, test and predict, in jsonargparse's style.

A subcommand is a function whose type hints and Google-style docstring are its options and its
``--help`` (``lintf build`` is ``lintf.ops.extension.build.build``), or a mapping of such functions by
subcommand name (``lintf checkpoint upgrade``, ``lintf asr vtln``). A ``Command`` names it by
import path, so ``lintf --help`` lists it without importing it. lintf's own are ``build`` and
``checkpoint``; extensions (``lintf.run.extensions``) add theirs with ``register_command``.

Parameters become options (``batch_size``: ``--batch-size``; ``--batch_size``, as in Python and in
fit's options, is read too), positional-only parameters positional arguments; a list takes one or
more values (``--warps 0.9 1.0``), a bool is a ``--cuda`` / ``--no-cuda`` pair. Bad input ends in ``lintf <command>: error: <one
paragraph>`` and exit status 2: a mistake in the options, or a ValueError the function raises
(``CommandError`` where it checks its input itself). LINTF_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import docstring_parser
from jsonargparse import ActionYesNo

from lintf.run.extensions import load_extensions
from lintf.run.parsers import CommandParser

class CommandError(ValueError):
    """Bad input to a command, found while it runs: reported in one paragraph, exit status 2."""


TRAINER_SUBCOMMANDS = {
    "fit": "Train a task (or resume one: --ckpt_path).",
    "validate": "Evaluate a checkpoint on the validation data.",
    "test": "Evaluate a checkpoint on the test data.",
    "predict": "Predict with a checkpoint (into predictions/).",
}
"""LightningCLI's subcommands, with their line of ``lintf --help``."""


@dataclass(frozen=True)
class Command:
    """A ``lintf`` subcommand beside fit/validate/test/predict, imported only when it runs.

    Args:
        name: the word after ``lintf``.
        summary: its line of ``lintf --help`` (about 50 characters).
        target: ``module:attribute`` of the function, or of a mapping from subcommand names to functions.
        requires: modules the command needs beyond lintf's dependencies (an optional extra's).
        missing: what to install when one of them is missing or importing ``target`` fails, said after the error.
    """

    name: str
    summary: str
    target: str
    requires: tuple[str, ...] = ()
    missing: str = ""

    def load(self) -> tuple[Callable[..., Any] | Mapping[str, Callable[..., Any]], str | None]:
        """The function (or mapping of functions) and, for a mapping, its module's docstring."""
        module_name, _, attribute = self.target.partition(":")
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
        return target, (module.__doc__ if isinstance(target, Mapping) else None)


CORE_COMMANDS = (
    Command("build", "Build the compiled causal-product op ahead of time.", "lintf.ops.extension.build:build"),
    Command("checkpoint", "Checkpoint files: upgrade (an older lintf's).", "lintf.run.checkpoint_format:COMMANDS"),
    Command("generate", "Generate text, copies or images from a checkpoint.", "lintf.generation.command:generate"),
    Command("export", "Write a checkpoint as a Hugging Face model directory.", "lintf.generation.export:export",
            requires=("transformers", "safetensors"), missing='pip install "lintf[hf]"'),
    Command("compare", "Plot runs' curves together; table their final metrics.", "lintf.run.compare:compare",
            requires=("matplotlib",), missing="`lintf compare` draws with matplotlib: pip install matplotlib"),
)
_registered: dict[str, Command] = {}


def register_command(command: Command) -> None:
    """Add ``lintf <command.name>`` (an extension calls this when it is loaded)."""
    taken = {*TRAINER_SUBCOMMANDS, *(core.name for core in CORE_COMMANDS)}
    if command.name in taken or _registered.get(command.name, command) != command:
        raise ValueError(f"`lintf {command.name}` exists already; an extension must name its command otherwise")
    _registered[command.name] = command


def all_commands(extensions: bool = True) -> tuple[Command, ...]:
    """lintf's own commands, then those of the installed extensions (loaded here unless ``extensions`` is False)."""
    if extensions:
        load_extensions()
    return (*CORE_COMMANDS, *_registered.values())


def find_command(name: str) -> Command | None:
    """The command called ``name``; None for fit/validate/test/predict, options and unknown names."""
    if name in TRAINER_SUBCOMMANDS or name.startswith("-"):
        return None
    return next((command for command in all_commands() if command.name == name), None)


def fail(prog: str, message: str) -> NoReturn:
    """``<prog>: error: <message>`` on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_command(command: Command, args: Sequence[str]) -> Any:
    """Run ``lintf <command.name> <args>``; its result (None for a command that prints)."""
    prog = f"lintf {command.name}"
    absent = [name for name in command.requires if importlib.util.find_spec(name) is None]
    try:
        if absent:
            raise ModuleNotFoundError(f"No module named {absent[0]!r}", name=absent[0])
        target, description = command.load()
    except ImportError as error:
        if os.environ.get("LINTF_DEBUG"):
            raise
        fail(prog, f"{error}. {command.missing}" if command.missing else str(error))
    return run_function(target, args, prog, description)


def run_function(target: Callable[..., Any] | Mapping[str, Callable[..., Any]], args: Sequence[str] | None,
                 prog: str, description: str | None = None) -> Any:
    """Parse ``args`` for ``target`` (a function, or a mapping of subcommands to functions) and call it.

    Args:
        target: the command's function, or its subcommands' functions by name.
        args: the command line after the command's name; None reads ``sys.argv``.
        prog: the command's name in its usage and messages (``lintf build``).
        description: the ``--help`` text of a mapping (a function's is its docstring).
    """
    parser = command_parser(target, prog, description)
    config = parser.parse_args(sys.argv[1:] if args is None else list(args))
    if isinstance(target, Mapping):
        name = config.subcommand
        function, values, prog = target[name], config[name], f"{prog} {name}"
    else:
        function, values = target, config
    positional, keywords = call_arguments(function, values.as_dict())
    try:
        return function(*positional, **keywords)
    except ValueError as error:  # CommandError, and the input checks of what the command calls
        if os.environ.get("LINTF_DEBUG"):
            raise
        fail(prog, str(error).strip())


def command_parser(target: Callable[..., Any] | Mapping[str, Callable[..., Any]], prog: str,
                   description: str | None = None) -> CommandParser:
    """The parser of a function, or of a mapping of subcommands to functions (each listed by its first line)."""
    if not isinstance(target, Mapping):
        parser = CommandParser(prog=prog, description=description or function_description(target))
        add_function_options(parser, target)
        return parser
    parser = CommandParser(prog=prog, description=description)
    subcommands = parser.add_subcommands(dest="subcommand")
    for name, function in target.items():
        subparser = command_parser(function, f"{prog} {name}")
        subcommands.add_subcommand(name, subparser, help=function_description(function).splitlines()[0])
        parser.spellings.update(subparser.spellings)
    return parser


def function_description(function: Callable[..., Any]) -> str:
    """The docstring of ``function`` without its Args/Returns sections."""
    parsed = docstring_parser.parse(inspect.unwrap(function).__doc__ or "")
    return "\n\n".join(part for part in (parsed.short_description, parsed.long_description) if part)


def repeated(hint: Any) -> tuple[Any, int | str | None]:
    """(element type, nargs) of a list or tuple annotation: ``list[float]`` -> (float, "+"); else (None, None)."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, Sequence) and len(arguments) == 1:
        return arguments[0], "+"
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return arguments[0], "+"
    if origin is tuple and arguments and len(set(arguments)) == 1:
        return arguments[0], len(arguments)
    return None, None


def is_flag(hint: Any) -> bool:
    """Whether ``hint`` is ``bool`` or ``bool | None`` (a ``--x`` / ``--no_x`` flag)."""
    if hint is bool:
        return True
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return union and set(typing.get_args(hint)) == {bool, type(None)}


def real_number(value: str | float) -> float:
    """A float option's value as Python reads it: also ``nan`` and ``inf``, which the command then judges by its rule."""
    return float(value)


def add_function_options(parser: CommandParser, function: Callable[..., Any]) -> None:
    """One argument per parameter of ``function``: its name, type and default, and its docstring line as help."""
    function = inspect.unwrap(function)
    hints = typing.get_type_hints(function)
    docs = {param.arg_name: param.description or "" for param in docstring_parser.parse(function.__doc__ or "").params}
    for name, parameter in inspect.signature(function).parameters.items():
        hint, option = hints.get(name, Any), "--" + name.replace("_", "-")
        hint = real_number if hint is float else hint  # the parser itself refuses nan and inf without a reason
        options: dict[str, Any] = {"help": docs.get(name, ""), "dest": name}
        if parameter.default is not inspect.Parameter.empty:
            options["default"] = parameter.default
        element, nargs = repeated(hint)
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            del options["dest"]
            nargs = nargs or ("?" if "default" in options else None)
            parser.add_argument(name, type=element or hint, **({"nargs": nargs} if nargs else {}), **options)
        elif is_flag(hint):
            parser.add_argument(option, action=ActionYesNo(no_prefix="no-"), **options)
        elif nargs is not None:  # jsonargparse validates values of several items as lists
            if isinstance(options.get("default"), tuple):
                options["default"] = list(options["default"])
            parser.add_argument(option, type=element, nargs=nargs, required="default" not in options, **options)
        else:
            parser.add_argument(option, type=hint, required="default" not in options, **options)


def call_arguments(function: Callable[..., Any], values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The parsed ``values`` as ``function``'s positional and keyword arguments (tuples where it takes tuples)."""
    function = inspect.unwrap(function)
    hints = typing.get_type_hints(function)
    positional, keywords = [], {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name not in values:
            continue
        value = values[name]
        if typing.get_origin(hints.get(name)) is tuple and isinstance(value, list):
            value = tuple(value)
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(value)
        else:
            keywords[name] = value
    return positional, keywords
