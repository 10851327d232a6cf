"""Every subcommand in one style: `lintf --help` lists them all; each other one is a function whose signature and
docstring are its options, with bad input reported in one paragraph and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lintf.run.cli import main
from lintf.run.commands import (CORE_COMMANDS, TRAINER_SUBCOMMANDS, Command, CommandError, all_commands,
                                command_parser, find_command, register_command, run_function)
from lintf.run.extensions import ExtensionError, extension_entry_points, load_extensions

REPO = Path(__file__).resolve().parents[2]
SUBCOMMANDS = [*TRAINER_SUBCOMMANDS, *(command.name for command in CORE_COMMANDS), "data", "asr"]
"""Every subcommand, in the order of ``lintf --help``: the trainer's, lintf's own, the speech extension's."""


def failure(args: list[str], capsys) -> str:
    """The stderr of ``lintf <args>``, checked to be one paragraph ending in exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "usage:" not in err, err
    return err


def example(ckpt: str, scale: float = 1.0, tag: str | None = None, /, *, sizes: list[int], flag: bool = False,
            pair: tuple[float, float] = (0.5, 2.0), train_size: int = 3) -> dict:
    """Do an example thing.

    Longer description of the example.

    Args:
        ckpt: a path.
        scale: a factor.
        tag: an optional tag.
        sizes: one or more sizes.
        flag: a switch.
        pair: two numbers.
        train_size: a number with a two-word name.
    """
    if scale < 0:
        raise CommandError(f"--scale must be >= 0, got {scale}")
    return {"ckpt": ckpt, "sizes": sizes, "scale": scale, "tag": tag, "flag": flag, "pair": pair,
            "train_size": train_size}


def test_help_is_titled_lintf_and_lists_every_subcommand_on_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "usage: lintf [-c CONFIG] SUBCOMMAND ..." and "lintf: linear transformers" in out
    assert "(required)" not in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()[0] in SUBCOMMANDS]
    assert listed == SUBCOMMANDS
    assert {"fit", "validate", "test", "predict", "build", "checkpoint", "data", "asr"} <= set(listed)
    for line in out.splitlines():
        if line.startswith("    ") and line.split()[0] in SUBCOMMANDS:
            summary = line.split(None, 1)[1]
            assert summary.endswith(".") and len(line) <= 80, line  # one line each, not wrapped


def test_an_unknown_subcommand_names_every_subcommand(capsys):
    err = failure(["fitt"], capsys)
    assert "invalid choice: 'fitt'" in err and all(f"'{name}'" in err for name in SUBCOMMANDS)


def test_the_other_subcommands_are_found_by_name_without_the_trainer_ones():
    assert [command.name for command in all_commands()] == SUBCOMMANDS[len(TRAINER_SUBCOMMANDS):]
    assert find_command("fit") is None and find_command("--help") is None and find_command("nope") is None
    assert find_command("build") is CORE_COMMANDS[0]


def test_a_function_is_a_command_with_its_signature_and_docstring(capsys):
    parser = command_parser(example, "lintf example")
    parser.print_help()
    help_text = capsys.readouterr().out
    assert "Do an example thing.\n\nLonger description of the example." in help_text
    assert "ckpt" in help_text and "--train-size" in help_text and "a number with a two-word name" in help_text
    assert "--flag, --no-flag" in help_text and "--pair PAIR PAIR" in help_text
    result = run_function(example, ["a.ckpt", "--sizes", "1", "2", "--train-size", "5", "--flag"], "lintf example")
    assert result == {"ckpt": "a.ckpt", "sizes": [1, 2], "scale": 1.0, "tag": None, "flag": True, "pair": (0.5, 2.0),
                      "train_size": 5}
    result = run_function(example, ["a.ckpt", "2.5", "t", "--sizes", "3", "--train_size=7", "--pair", "1", "1.5"],
                          "lintf example")
    assert result["scale"] == 2.5 and result["tag"] == "t" and result["train_size"] == 7 and result["pair"] == (1.0, 1.5)


@pytest.mark.parametrize("args,expected", [
    (["a.ckpt"], "sizes"),  # a required option
    (["a.ckpt", "--sizes", "x"], "sizes"),  # a value of the wrong type
    (["a.ckpt", "--sizes", "1", "--size", "2"], "unrecognized arguments: --size"),
    (["a.ckpt", "-1", "--sizes", "1"], "--scale must be >= 0, got -1.0"),  # the function's own check
])
def test_bad_input_to_a_command_is_one_paragraph(args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_function(example, args, "lintf example")
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("lintf example: error: ") and expected in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def several(paths: list[str], /, output: str = "out.png") -> dict:
    """Take paths.

    Args:
        paths: one or more paths.
        output: a file.
    """
    return {"paths": paths, "output": output}


def test_a_positional_list_takes_one_or_more_values(capsys):
    assert run_function(several, ["a", "b", "--output", "c"], "lintf several") == {"paths": ["a", "b"], "output": "c"}
    assert run_function(several, ["a"], "lintf several") == {"paths": ["a"], "output": "out.png"}
    with pytest.raises(SystemExit) as exit_info:
        run_function(several, [], "lintf several")
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "required: paths" in err and len(err.splitlines()) == 1, err


def test_a_group_lists_its_subcommands_by_their_first_line(capsys):
    with pytest.raises(SystemExit):
        main(["checkpoint", "--help"])
    out = capsys.readouterr().out
    assert "upgrade" in out and "Write a copy of a checkpoint of an older lintf" in out
    err = failure(["checkpoint", "upgrade", "missing.ckpt"], capsys)
    assert err == "lintf checkpoint upgrade: error: missing.ckpt is not a file"


def test_build_is_a_subcommand_and_a_module(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["build", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith("usage: lintf build") and "--cuda, --no-cuda" in out
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", "build", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: lintf build") and "--output" in done.stdout
    assert "lintf build: error: unrecognized arguments: --cpu" in failure(["build", "--cpu"], capsys)


@pytest.mark.parametrize("group", ["data", "asr"])
def test_the_speech_commands_name_the_speech_extra_when_it_is_missing(group):
    script = f"import sys\nsys.modules['soundfile'] = None\nfrom lintf.run.cli import main\nmain([{group!r}, '--help'])\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"lintf {group}: error: No module named 'soundfile'. The speech commands need the "
                                   "speech extra: pip install \"lintf[speech]\"")


def test_an_extension_registers_commands_that_cannot_take_lintf_s_names():
    load_extensions()
    with pytest.raises(ValueError, match="`lintf fit` exists already"):
        register_command(Command("fit", "a second fit", "os:getcwd"))
    with pytest.raises(ValueError, match="`lintf asr` exists already"):
        register_command(Command("asr", "another asr", "os:getcwd"))
    assert {entry_point.name for entry_point in extension_entry_points()} >= {"speech"}


def test_a_failing_extension_is_named(monkeypatch, tmp_path, capsys):
    import lintf.run.extensions as extensions
    from importlib.metadata import EntryPoint

    broken = EntryPoint(name="broken", value="lintf_no_such_module:register", group=extensions.ENTRY_POINT_GROUP)
    monkeypatch.setattr(extensions, "_loaded", None)
    monkeypatch.setattr(extensions, "extension_entry_points", lambda: [broken])
    with pytest.raises(ExtensionError, match="lintf extension 'broken' .* failed to load: ModuleNotFoundError"):
        extensions.load_extensions()
    monkeypatch.setattr(extensions, "_loaded", None)
    err = failure(["--help"], capsys)
    assert err.startswith("lintf: error: lintf extension 'broken'")


def test_the_console_script_lists_the_speech_commands_outside_the_repository(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0 and "    data " in done.stdout and "    asr " in done.stdout
