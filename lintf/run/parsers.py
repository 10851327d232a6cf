"""The parsers of ``lintf``'s subcommands, and their mistakes reported in one readable paragraph.

A typo in a subclass-mode config makes jsonargparse print the whole usage and a tree of union
alternatives ("Expected a <class 'NoneType'>", "Given value: Namespace(...)"). The user needs
three things: which key, what was wrong, what is allowed (with a close match if there is one).
``LintfArgumentParser`` (fit, validate, test, predict) and ``CommandParser`` (every other
subcommand) print ``<prog>: error: <one paragraph>`` and exit with status 2 (LINTF_DEBUG=1 keeps
jsonargparse's own report).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import inspect
import os
import re
import sys
import typing
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from jsonargparse import ArgumentParser, DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser

from lintf.names import import_class

NOISE = re.compile(
    r"^(Does not validate against any of the|Subtypes:|Errors:|Expected a <class '(?:NoneType|list)'>|Given value|"
    r"Parser key \"|Problem with given class_path|tip: )"
)
NOT_OF_TYPE = re.compile(r"^Not of type \w+: ")


def init_arguments(class_path: str) -> list[str]:
    """Constructor arguments of ``class_path`` (empty if it cannot be imported)."""
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
        return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, ValueError, TypeError):
        return []


def nested_fields(class_path: str, argument: str) -> list[str]:
    """Fields of the dataclass that ``class_path``'s argument ``argument`` takes (e.g. the encoder's), or []."""
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
        annotation = typing.get_type_hints(cls.__init__).get(argument)
    except (ImportError, AttributeError, ValueError, TypeError, NameError):
        return []
    return [field.name for field in dataclasses.fields(annotation)] if dataclasses.is_dataclass(annotation) else []


def explain_nested_option(option: str, class_path: str) -> str | None:
    """For ``encoder.d_modle=8`` on a task: "encoder option 'd_modle' is not accepted. Did you mean ...", else None."""
    head, _, tail = option.partition("=")[0].partition(".")
    accepted = nested_fields(class_path, head) if tail else []
    if not accepted:
        return None
    return f"{head} option '{tail}' is not accepted.{did_you_mean(tail, accepted)} {head} accepts: {', '.join(accepted)}"


def did_you_mean(wrong: str, allowed: Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest allowed name, or ''."""
    close = difflib.get_close_matches(wrong, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def summarize(message: str, known_options: Iterable[str] = ()) -> str:
    """One paragraph from a jsonargparse error ``message``.

    Args:
        message: the parser's error text, possibly a nested union report.
        known_options: dotted option names of the parser, for suggestions on unknown keys.
    """
    keys = re.findall(r'Parser key "([^"]+)"', message)
    class_path = re.search(r"class_path '([^']+)'", message)
    details = []
    for line in message.splitlines():
        line = line.strip().removeprefix("- ").strip()
        if line and not NOISE.match(line):
            details.append(NOT_OF_TYPE.sub("", line))
    text = " ".join(dict.fromkeys(details)) or message.strip()
    where = ".".join(keys)
    if class_path:
        arguments = init_arguments(class_path.group(1))
        where = f"{where} ({class_path.group(1)})" if where else class_path.group(1)
        option = re.search(r"Option '([^']+)' is not accepted", text)
        if option and arguments:
            text += f".{did_you_mean(option.group(1), arguments)} It accepts: {', '.join(arguments)}"
    factory = factory_mistake(message, where)
    if factory:
        return factory
    option = re.search(r"does not accept option '([^']+)'", text) or re.search(r"unrecognized arguments: --(\S+)", text)
    nested = explain_nested_option(option.group(1), class_path.group(1)) if option and class_path else None
    if nested:
        text = nested
    elif option:
        text += f".{did_you_mean(option.group(1), known_options)}"
    return f"{where}: {text}" if where else text


FACTORY_EXAMPLES = {
    "optimizer": ("an optimizer (a subclass of torch.optim.Optimizer)", "torch.optim.AdamW", "lr: 0.001"),
    "lr_scheduler": ("a learning-rate schedule (a subclass of torch.optim.lr_scheduler.LRScheduler)",
                     "torch.optim.lr_scheduler.OneCycleLR", "max_lr: 0.001, total_steps: 1000"),
}
"""The Callable-typed options of the tasks: what they take, and an example of it."""


def factory_mistake(message: str, where: str) -> str | None:
    """For a function or other non-class given as the optimizer or schedule: what the option takes, else None.

    jsonargparse reports such a value by the function's own parameters ("the following arguments are
    required: command" for os.system), as if supplying them would help.
    """
    name = next((key for key in FACTORY_EXAMPLES if re.search(rf"\b{key}\b", where)), None)
    if name is None or "expects a function or a callable class" not in message:
        return None
    given = re.search(r"class_path='([^']+)'", message) or re.search(r"Got value: (\S+?)\.?$", message, re.M)
    if given and isinstance(import_class(given.group(1)), type):
        return None  # a class with wrong arguments: jsonargparse's own words name them
    kind, example, arguments = FACTORY_EXAMPLES[name]
    value = f"{given.group(1)!r} is not {kind}" if given else f"it takes {kind}"
    return (f"{where}: {value}; give one by class path: {example}, or {{class_path: {example}, init_args: "
            f"{{{arguments}}}}}")


def exit_with_one_paragraph(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """Print ``<prog>: error: <message summarized>. Run `<prog> --help` ...`` and exit with status 2."""
    prog = parser.prog.replace(" [options]", "")
    # argparse keeps every option string in _option_string_actions (private, unchanged since Python 2.7)
    known = [option.lstrip("-") for option in parser._option_string_actions]
    text = summarize(message, known)
    text += " " if text.endswith((".", "?")) else ". "
    sys.stderr.write(f"{prog}: error: {text}Run `{prog} --help` for every option.\n")
    raise SystemExit(2)


class OneParagraphErrors:
    """Reports a bad option or value in one paragraph instead of the usage and a union tree."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("LINTF_DEBUG"):
            super().error(message, ex)
        exit_with_one_paragraph(getattr(ex, "subcommand_parser", None) or self, message)


class LintfArgumentParser(OneParagraphErrors, LightningArgumentParser):
    """The parser of ``lintf fit|validate|test|predict``; keeps its subcommands' action for ``lintf --help``."""

    subcommands_action: Any = None

    def add_subcommands(self, *args: Any, **kwargs: Any) -> Any:
        self.subcommands_action = super().add_subcommands(*args, **kwargs)
        return self.subcommands_action


class CommandHelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, with descriptions printed as written (their example command lines intact)."""


class CommandParser(OneParagraphErrors, ArgumentParser):
    """The parser of a ``lintf`` subcommand beside fit/validate/test/predict (``lintf build``, ``lintf asr vtln``, ...).

    Options are spelled with dashes (``--train-manifest``); the spelling with underscores, as in the
    option's Python name and in LightningCLI's options (``--train_manifest``), is read as the same option.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", CommandHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # as fit's: a misspelt option is an error, not a guess
        super().__init__(*args, **kwargs)
        self.spellings: dict[str, str] = {}
        """``--with_underscores`` -> ``--with-dashes`` for the options of this parser and its subcommands."""

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        action = super().add_argument(*args, **kwargs)
        for option in getattr(action, "option_strings", args):
            if option.startswith("--") and "-" in option[2:]:
                self.spellings[option[:2] + option[2:].replace("-", "_")] = option
        return action

    def parse_args(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_args(respelled(args, self.spellings), *rest, **kwargs)


def respelled(args: list[str], spellings: dict[str, str]) -> list[str]:
    """``args`` with each ``--option[=value]`` named in ``spellings`` spelled as it says (up to a ``--``)."""
    spelled = []
    for index, arg in enumerate(args):
        if arg == "--":
            return spelled + args[index:]
        name, equals, value = arg.partition("=")
        spelled.append(spellings.get(name, name) + equals + value if arg.startswith("--") else arg)
    return spelled
