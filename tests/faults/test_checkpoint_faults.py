"""Checkpoint faults: unreadable candidates are skipped, older layouts are named and upgraded, nothing is lost."""

from __future__ import annotations

import os

import pytest
import torch

from lintf.layout.checkpoint_version import FORMAT
from lintf.models import EncoderConfig
from lintf.run.checkpoint_format import upgrade
from lintf.run.checkpoint_search import CheckpointError, resolve_checkpoint
from lintf.run.cli import main
from lintf.tasks import CopyTask, ImageGenerationTask

COPY = "lintf.tasks.copy.CopyTask"


def write(path, checkpoint, mtime: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    os.utime(path, (mtime, mtime))


def test_unreadable_last_checkpoint_is_skipped_for_a_valid_one(tmp_path):
    good = tmp_path / "a" / "checkpoints" / "last.ckpt"
    write(good, {"lintf_task": COPY, "lintf_format": FORMAT, "state_dict": {}}, 1_000)
    broken = tmp_path / "b" / "checkpoints" / "last.ckpt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"PK\x03\x04 truncated")  # newer, but a run died while writing it
    os.utime(broken, (2_000, 2_000))
    with pytest.warns(UserWarning, match=f"skipped unreadable {broken}"):
        assert resolve_checkpoint("last", COPY, [str(tmp_path)]) == str(good)


def test_only_unreadable_or_older_checkpoints_name_them(tmp_path):
    broken = tmp_path / "b" / "checkpoints" / "last.ckpt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a checkpoint")
    old = tmp_path / "c" / "checkpoints" / "last.ckpt"
    write(old, {"lintf_task": COPY, "state_dict": {}}, 1_000)
    with pytest.raises(CheckpointError) as error:
        resolve_checkpoint("last", COPY, [str(tmp_path)])
    assert f"unreadable: {broken}" in str(error.value) and "lintf checkpoint upgrade" in str(error.value)
    with pytest.raises(CheckpointError, match="written by an older lintf"):
        resolve_checkpoint(str(old), COPY, [str(tmp_path)])


def format_one(task) -> dict:
    """What an older lintf wrote: flat encoder options, decoding options in the model, old weight names."""
    state = {("position_embedding" if name == "positions.embedding" else name): value
             for name, value in task.state_dict().items()}
    hparams = {"vocab_size": 12, "max_length": 24, "d_model": 16, "n_layers": 1, "n_heads": 2, "attention": "linear",
               "dropout": 0.0, "positions": "learned", "head": "categorical", "decoder": "beam"}
    return {"lintf_task": COPY, "state_dict": state, "hyper_parameters": hparams, "optimizer_states": [{}]}


def test_format_one_checkpoint_upgrades_to_the_same_model(tmp_path):
    torch.manual_seed(0)
    task = CopyTask(12, 24, EncoderConfig(d_model=16, n_layers=1, n_heads=2, dropout=0.0)).eval()
    upgraded = upgrade(format_one(task))
    assert upgraded["lintf_format"] == FORMAT and "optimizer_states" not in upgraded
    assert upgraded["lintf_decoding"] == {"decoder": "beam"}
    restored = CopyTask(**{k: v for k, v in upgraded["hyper_parameters"].items()}).eval()
    restored.load_state_dict(upgraded["state_dict"])
    tokens = torch.randint(0, 12, (2, 10))
    torch.testing.assert_close(restored(tokens), task(tokens))


def test_upgrade_command_keeps_the_original(tmp_path, capsys):
    torch.manual_seed(0)
    old = tmp_path / "old.ckpt"
    torch.save(format_one(CopyTask(12, 24, EncoderConfig(d_model=16, n_layers=1, n_heads=2))), old)
    before = old.read_bytes()
    main(["checkpoint", "upgrade", str(old)])
    new = tmp_path / f"old-format{FORMAT}.ckpt"
    assert old.read_bytes() == before and torch.load(new, weights_only=True)["lintf_format"] == FORMAT
    with pytest.raises(SystemExit):
        main(["checkpoint", "upgrade", str(old)])  # the upgrade exists: never overwritten
    assert "exists" in capsys.readouterr().err


def test_raster_weights_are_renamed():
    task = ImageGenerationTask(256, 11, EncoderConfig(d_model=16, n_layers=1, n_heads=2), positions="raster", row_bytes=4)
    old = {name.replace("positions.", ""): value for name, value in task.state_dict().items()}
    assert "row_embedding" in old
    renamed = upgrade({"state_dict": old, "hyper_parameters": {}})["state_dict"]
    assert renamed.keys() == task.state_dict().keys()


def flip_a_byte_inside_a_tensor(path, tensor: torch.Tensor) -> None:
    data = bytearray(path.read_bytes())
    offset = bytes(data).find(tensor.contiguous().numpy().tobytes())
    assert offset > 0
    data[offset + 2] ^= 0x40  # a bit of the first value's exponent
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_reported_not_loaded(tmp_path, capsys):
    from tests.cli.helpers import run, tiny

    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    last = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    assert (last.parent / "last.ckpt.sha256").is_file() and not list(last.parent.glob(".*.tmp"))
    before = torch.load(last, weights_only=True)["state_dict"]
    flip_a_byte_inside_a_tensor(last, before["token_embedding.weight"])
    after = torch.load(last, weights_only=True)["state_dict"]  # torch itself loads it: silently different weights
    assert any(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(tmp_path, "--ckpt_path", str(last), subcommand="predict"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"checkpoint {last} does not match the sha256" in err
    best = last.parent / "best.ckpt"
    with pytest.raises(CheckpointError, match=f"unreadable: {last}"):
        resolve_checkpoint("last", COPY, [str(tmp_path)])
    assert resolve_checkpoint("best", COPY, [str(tmp_path)]) == str(best)  # the run's other checkpoint still serves


def test_checkpoint_io_writes_whole_files_with_a_digest_and_checks_it(tmp_path):
    from lintf.run.checkpoint_files import CheckpointIntegrityError, VerifiedCheckpointIO, sidecar_of

    io = VerifiedCheckpointIO()
    path = tmp_path / "run" / "a.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.arange(1000.0)}}, path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.ckpt", "a.ckpt.sha256"]
    assert torch.equal(io.load_checkpoint(path)["state_dict"]["w"], torch.arange(1000.0))
    flip_a_byte_inside_a_tensor(path, torch.arange(1000.0))
    with pytest.raises(CheckpointIntegrityError, match=f"checkpoint {path} does not match the sha256"):
        io.load_checkpoint(path)
    io.remove_checkpoint(path)
    assert not path.exists() and not sidecar_of(path).exists()
