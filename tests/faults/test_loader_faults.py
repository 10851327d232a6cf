"""Loader faults: a checkpoint is read by one function that runs nothing from the file and verifies its digest;
`lintf asr vtln|adapt|lm-sweep` refuse a bad checkpoint with one paragraph and exit 2, writing nothing."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.model.task import ASRTask
from lintf.run.checkpoint_files import VerifiedCheckpointIO, load_checkpoint_file, sidecar_of
from lintf.run.cli import main
from lintf.models.encoder_config import EncoderConfig
from tests.asr.conftest import tone_corpus

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ["vtln", "adapt", "lm-sweep"]


class Payload:
    """Unpickling it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A tone corpus and a tiny ASRTask checkpoint trained on it for two steps (``ckpt``)."""
    directory = tmp_path_factory.mktemp("asr")
    corpus = tone_corpus(directory / "corpus")
    torch.manual_seed(0)
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=3, hop_ms=5.0)
    task = ASRTask(data.vocab_size, data.max_length, EncoderConfig(d_model=16, n_layers=1, n_heads=2), conv_channels=4)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_val_batches=0, default_root_dir=directory)
    trainer.fit(task, datamodule=data)
    trainer.save_checkpoint(directory / "asr.ckpt")
    (directory / "decode.yaml").write_text("decoding:\n  class_path: lintf.asr.CTCDecoding\n")
    return {**corpus, "ckpt": directory / "asr.ckpt", "config": directory / "decode.yaml"}


def command_line(command: str, ckpt: Path, trained: dict[str, Path], out: Path) -> list[str]:
    """``lintf asr <command>`` on ``ckpt`` with arguments that make a quick run of a good checkpoint."""
    common = ["asr", command, "--ckpt", str(ckpt), "--manifest", str(trained["test"]), "--out", str(out)]
    if command == "vtln":
        return [*common, "--warps", "1.0"]
    if command == "lm-sweep":
        return [*common, "--train-manifest", str(trained["train"]), "--orders", "0", "--limit", "2"]
    return [*common, "--config", str(trained["config"]), "--train-manifest", str(trained["train"]), "--rounds", "1",
            "--steps", "1", "--labelled", "2", "--adapted", str(out / "adapted.ckpt")]


def refusal(command: str, ckpt: Path, trained: dict[str, Path], tmp_path: Path, capsys) -> str:
    """The stderr of ``lintf asr <command>`` on ``ckpt``, checked to exit 2 having written nothing."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as code:
        main(command_line(command, ckpt, trained, out))
    err = capsys.readouterr().err
    assert code.value.code == 2, err
    assert f"lintf asr {command}: error: " in err and "Traceback" not in err
    assert not out.exists()
    return err.split(": error: ", 1)[1]


def saved_copy(trained: dict[str, Path], path: Path, **changes) -> Path:
    """The trained checkpoint with ``changes``, written with a sha256 sidecar to ``path``."""
    contents = load_checkpoint_file(trained["ckpt"])
    VerifiedCheckpointIO().save_checkpoint({**contents, **changes}, path)
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_pickle_payload_never_runs(command, trained, tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    ckpt = tmp_path / "payload.ckpt"
    torch.save({**load_checkpoint_file(trained["ckpt"]), "extra": Payload(marker)}, ckpt)
    message = refusal(command, ckpt, trained, tmp_path, capsys)
    assert not marker.exists()
    assert f"checkpoint {ckpt} holds objects whose loading would run code" in message
    assert "weights_only=True" in message and "weights_only=False" not in message


@pytest.mark.parametrize("command", COMMANDS)
def test_a_checkpoint_that_fails_its_digest_is_refused(command, trained, tmp_path, capsys):
    ckpt = saved_copy(trained, tmp_path / "damaged.ckpt")
    sidecar_of(ckpt).write_text(f"{'0' * 64}  damaged.ckpt\n")
    message = refusal(command, ckpt, trained, tmp_path, capsys)
    assert f"checkpoint {ckpt} does not match the sha256 recorded when it was written" in message


def test_another_tasks_checkpoint_is_refused(trained, tmp_path, capsys):
    ckpt = saved_copy(trained, tmp_path / "copy.ckpt", lintf_task="lintf.tasks.copy.CopyTask")
    message = refusal("vtln", ckpt, trained, tmp_path, capsys)
    assert message.startswith(f"checkpoint {ckpt} was written by task lintf.tasks.copy.CopyTask, not by "
                              "lintf.asr.model.task.ASRTask; --ckpt takes the checkpoint of a speech recognition run")


def test_an_older_format_is_refused_with_the_upgrade_command(trained, tmp_path, capsys):
    ckpt = saved_copy(trained, tmp_path / "old.ckpt", lintf_format=1)
    message = refusal("lm-sweep", ckpt, trained, tmp_path, capsys)
    assert "written by an older lintf (checkpoint format 1" in message
    assert f"`lintf checkpoint upgrade {ckpt}`" in message


def test_a_good_checkpoint_with_its_digest_still_runs(trained, tmp_path, capsys):
    ckpt = saved_copy(trained, tmp_path / "good.ckpt")
    main(command_line("vtln", ckpt, trained, tmp_path / "out"))
    assert (tmp_path / "out" / "asr_vtln.json").is_file()


def loads(path: Path) -> list[str]:
    """What in ``path`` reads a pickle or disables torch's safe loading: ``torch.load(``, ``pickle.load(s)(``,
    ``weights_only=False`` and ``from torch/pickle import load(s)``, as ``"<kind> line N"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        function = getattr(node, "func", None)
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
            if (function.value.id, function.attr) in {("torch", "load"), ("pickle", "load"), ("pickle", "loads")}:
                found.append(f"{function.value.id}.{function.attr} line {node.lineno}")
        if isinstance(node, ast.keyword) and node.arg == "weights_only" and getattr(node.value, "value", None) is False:
            found.append(f"weights_only=False line {node.value.lineno}")
        if isinstance(node, ast.ImportFrom) and node.module in ("torch", "pickle"):
            found += [f"from {node.module} import {a.name} line {node.lineno}" for a in node.names
                      if a.name in ("load", "loads")]
    return found


def test_one_checkpoint_loader():
    files = sorted([*(REPO / "lintf").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")])
    found = {str(path.relative_to(REPO)): hits for path in files if (hits := loads(path))}
    reader = found.pop("lintf/run/checkpoint_files.py", [])
    assert len(reader) == 1 and reader[0].startswith("torch.load line")  # load_checkpoint_file's, the only one
    assert found == {}, "read checkpoints with lintf.run.checkpoint_files.load_checkpoint_file, never pickle"
