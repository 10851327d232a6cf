"""A checkpoint copied out of its run (``model.ckpt`` in the working directory) still gets a named run directory:
``lintf generate``, ``test`` and ``predict`` write into ``lightning_logs/copy-linear/version_N``, never an unnamed
``lightning_logs/version_N``; ``test`` without the config it needs says so in one paragraph.

Each journey runs the ``lintf`` command (``main``) on the tiny copy task, as a user types the commands.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lintf.run.cli import main
from tests.cli.helpers import tiny

RUN = Path("lightning_logs") / "copy-linear"


def lintf(*args: str) -> None:
    try:
        main(list(args))
    except SystemExit as error:
        pytest.fail(f"lintf {args[0]} exited with {error.code}")


def copied_checkpoint(tmp_path: Path) -> Path:
    """A 2-step copy run trained under ``tmp_path/trained``; its last checkpoint copied to ``tmp_path/work``."""
    lintf(*tiny(tmp_path / "trained", "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"))
    work = tmp_path / "work"
    work.mkdir()
    for suffix in ("", ".sha256"):
        shutil.copy(tmp_path / "trained" / RUN / "version_0" / "checkpoints" / f"last.ckpt{suffix}",
                    work / f"model.ckpt{suffix}")
    return work


def run_directories(work: Path) -> list[str]:
    return sorted(str(path.relative_to(work / "lightning_logs")) for path in work.glob("lightning_logs/**/version_*"))


def test_generate_test_and_predict_of_a_copied_checkpoint_write_into_named_runs(tmp_path, capsys, monkeypatch):
    work = copied_checkpoint(tmp_path)
    monkeypatch.chdir(work)
    capsys.readouterr()
    lintf("generate", "--ckpt_path", "model.ckpt", "--prompt", "3 1 4", "--output", "copies.txt")
    err = capsys.readouterr().err
    assert f"run directory: {work / RUN / 'version_0'}" in err
    assert (work / RUN / "version_0" / "samples" / "copies.txt").read_text().startswith("3 1 4 SEP")
    for subcommand in ("test", "predict"):
        lintf(*tiny(work, "--ckpt_path", "model.ckpt", subcommand=subcommand))
    out = capsys.readouterr().out
    assert re.findall(r"^run directory: (.*)$", out, re.MULTILINE)[-1] == str(work / RUN / "version_2")
    assert (work / RUN / "version_2" / "predictions" / "predictions.jsonl").is_file()
    assert run_directories(work) == ["copy-linear/version_0", "copy-linear/version_1", "copy-linear/version_2"]


def test_testing_a_copied_checkpoint_without_its_config_asks_for_the_config(tmp_path, capsys, monkeypatch):
    work = copied_checkpoint(tmp_path)
    monkeypatch.chdir(work)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--ckpt_path", "model.ckpt"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.startswith("lintf: error: checkpoint model.ckpt is in no run directory") and len(err.splitlines()) == 1
    assert "lintf test --config CONFIG --ckpt_path model.ckpt" in err
    assert not (work / "lightning_logs").exists()
