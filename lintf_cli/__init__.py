"""The ``lintf`` console script: ``lintf --help`` (and ``lintf`` alone) without importing torch or Lightning.

Listing the subcommands needs their names and summaries only, yet ``import lintf`` registers every
attention, which imports torch, and the full parser is LightningCLI's: seconds before a line appears.
This package lies outside ``lintf`` so that importing it runs none of that. It knows the listing of
lintf's own subcommands and of the extensions lintf ships (``SUBCOMMANDS``, ``SHIPPED_EXTENSIONS``,
kept equal to ``lintf.run.cli``'s by tests/journeys/test_fast_help.py) and draws it with jsonargparse,
as the full parser does. Any other command line, an extension it does not know or LINTF_DEBUG=1 goes
to ``lintf.run.cli.main``, which loads everything and says the same.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import distributions
from typing import Any, NoReturn

DESCRIPTION = ("lintf: linear transformers (Katharopoulos et al. 2020) on PyTorch Lightning.\n"
               "`lintf <subcommand> --help` describes each subcommand.")
SUBCOMMANDS = (
    ("fit", "Train a task (or resume one: --ckpt_path)."),
    ("validate", "Evaluate a checkpoint on the validation data."),
    ("test", "Evaluate a checkpoint on the test data."),
    ("predict", "Predict with a checkpoint (into predictions/)."),
    ("build", "Build the compiled causal-product op ahead of time."),
    ("checkpoint", "Checkpoint files: upgrade (an older lintf's)."),
    ("generate", "Generate text, copies or images from a checkpoint."),
    ("export", "Write a checkpoint as a Hugging Face model directory."),
    ("compare", "Plot runs' curves together; table their final metrics."),
)
"""``lintf --help``'s lines for LightningCLI's subcommands and lintf's own (``lintf.run.commands``)."""
EXTENSION_GROUP = "lintf.extensions"
SHIPPED_EXTENSIONS = {
    ("speech", "lintf.asr.extension:register"): (
        ("data", "Build speech corpora: synth-speech, librivox, ..."),
        ("asr", "Speech model workflows: vtln, adapt, lm-sweep."),
    ),
}
"""The subcommands that each extension entry point installed with lintf registers (``lintf.asr.extension``)."""


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lintf`` console script: the listing of subcommands here, anything else by lintf.run.cli."""
    argv = sys.argv[1:] if args is None else list(args)
    listed = argv in ([], ["-h"], ["--help"]) and not os.environ.get("LINTF_DEBUG")  # DEBUG: the full parser's traces
    listing = subcommand_listing() if listed else None
    if listing is None:
        from lintf.run.cli import main as run_main

        run_main(args)
        return
    parser = listing_parser(listing)
    parser.parse_args(argv)  # prints the help and exits 0, or says that a subcommand is needed and exits 2


def subcommand_listing() -> list[tuple[str, str]] | None:
    """Every subcommand with its summary; None where an installed extension is not one lintf ships."""
    listing = list(SUBCOMMANDS)
    seen: set[tuple[str, str]] = set()
    for distribution in distributions():  # every copy of the metadata, as lintf.run.extensions reads them
        for entry_point in distribution.entry_points:
            key = (entry_point.name, entry_point.value)
            if entry_point.group != EXTENSION_GROUP or key in seen:
                continue
            if key not in SHIPPED_EXTENSIONS:
                return None
            seen.add(key)
            listing.extend(SHIPPED_EXTENSIONS[key])
    return listing


def listing_parser(listing: list[tuple[str, str]]) -> Any:
    """A parser whose help and missing-subcommand error are those of the full ``lintf`` parser."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    class ListingParser(ArgumentParser):
        def error(self, message: str, ex: Exception | None = None) -> NoReturn:
            text = message.strip()
            text += " " if text.endswith((".", "?")) else ". "
            sys.stderr.write(f"lintf: error: {text}Run `lintf --help` for every option.\n")
            raise SystemExit(2)

    parser = ListingParser(prog="lintf", description=DESCRIPTION, allow_abbrev=False)
    parser.add_argument("-c", "--config", action=ActionConfigFile,
                        help="Path to a configuration file in json or yaml format.")
    subcommands = parser.add_subcommands()
    for name, summary in listing:
        subcommands.add_subcommand(name, ArgumentParser(description=summary), help=summary)
    subcommands.metavar, subcommands.help = "SUBCOMMAND", ""
    return parser
