"""``lintf --help`` and ``lintf`` alone answer without importing torch or Lightning, with the full CLI's very words.

The console script is ``lintf_cli:main``; ``python -m lintf.run.cli`` is the full parser (LightningCLI
over every task), which the fast listing must match line for line, every subcommand included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

import lintf_cli
from tests.cli.helpers import REPO

HEAVY = ("torch", "lightning", "pytorch_lightning", "lintf")
PROBE = """
import json, os, sys
from lintf_cli import main
try:
    main(sys.argv[1:])
finally:
    with open(os.environ["MODULES_FILE"], "w") as file:
        json.dump(sorted(sys.modules), file)
"""


def lintf(module_args: list[str], args: list[str], tmp_path, columns: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": str(REPO), "MODULES_FILE": str(tmp_path / "modules.json")}
    env.pop("LINTF_DEBUG", None)
    return subprocess.run([sys.executable, *module_args, *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env=env)


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=["--help", "-h", "nothing"])
@pytest.mark.parametrize("columns", ["80", "132"])
def test_the_listing_imports_neither_torch_nor_lightning_and_matches_the_full_cli(args, columns, tmp_path):
    fast = lintf(["-c", PROBE], args, tmp_path, columns)
    imported = json.loads((tmp_path / "modules.json").read_text())
    assert [name for name in imported if name.split(".")[0] in HEAVY] == []
    full = lintf(["-m", "lintf.run.cli"], args, tmp_path, columns)
    assert full.returncode == (0 if args else 2)
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)


def test_the_console_script_is_the_fast_entry_point():
    text = (REPO / "pyproject.toml").read_text()
    assert 'lintf = "lintf_cli:main"' in text


def test_an_extension_lintf_does_not_ship_sends_the_listing_to_the_full_cli(monkeypatch):
    class Distribution:
        entry_points = [EntryPoint(name="mytask", value="mytask.extension:register", group=lintf_cli.EXTENSION_GROUP)]

    assert lintf_cli.subcommand_listing() is not None
    monkeypatch.setattr(lintf_cli, "distributions", lambda: [Distribution()])
    assert lintf_cli.subcommand_listing() is None


def test_other_command_lines_run_the_full_cli(tmp_path):
    done = lintf(["-c", PROBE], ["fitt"], tmp_path, "80")
    assert done.returncode == 2 and "invalid choice: 'fitt'" in done.stderr
    assert "lightning" in {name.split(".")[0] for name in json.loads((tmp_path / "modules.json").read_text())}
