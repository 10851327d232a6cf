"""``lintf asr <command>``: workflows on a trained speech model.

    lintf asr vtln --ckpt CKPT --manifest SPEAKER.jsonl        # the speaker's filterbank warp, no transcripts
    lintf asr adapt --ckpt CKPT --manifest SPEAKER.jsonl --warp W --adapted OUT.ckpt   # self-training
    lintf asr lm-sweep --ckpt CKPT --manifest DEV.jsonl --lm-text LM.txt   # LM weight and bonus of the beam

Each prints a table and writes ``<name>.md`` and ``.json`` under ``--out`` (default: beside the
checkpoint's run directory, ``<run>/<name>/``).
"""

from __future__ import annotations

import argparse
import sys

from lintf.asr.commands import adapt, lm_sweep, vtln

COMMANDS = {"vtln": vtln, "adapt": adapt, "lm-sweep": lm_sweep}


def main(args: list[str] | None = None) -> None:
    """Run ``lintf asr <command>``; ``args`` excludes ``lintf asr``."""
    parser = argparse.ArgumentParser(prog="lintf asr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, module in COMMANDS.items():
        sub = commands.add_parser(name, prog=f"lintf asr {name}", help=module.__doc__.splitlines()[0],
                                  description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, parser=sub)
    options = parser.parse_args(sys.argv[1:] if args is None else args)
    run, command_parser = options.run, options.parser
    del options.run, options.parser, options.command  # the rest are the command's settings, saved with its report
    run(options, command_parser)
