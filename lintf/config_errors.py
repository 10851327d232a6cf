"""Turn jsonargparse's nested validation reports into one readable paragraph.

A typo in a subclass-mode config makes jsonargparse print the whole usage and a tree of union
alternatives ("Expected a <class 'NoneType'>", "Given value: Namespace(...)"). The user needs
three things: which key, what was wrong, what is allowed (with a close match if there is one).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Iterable

NOISE = re.compile(
    r"^(Does not validate against any of the|Subtypes:|Errors:|Expected a <class 'NoneType'>|Given value|"
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
    option = re.search(r"does not accept option '([^']+)'", text) or re.search(r"unrecognized arguments: --(\S+)", text)
    if option:
        text += f".{did_you_mean(option.group(1), known_options)}"
    return f"{where}: {text}" if where else text
