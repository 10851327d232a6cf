"""Files that are not checkpoints, checkpoints cut short, and checkpoints without their digest: named as such."""

from __future__ import annotations

import os

import pytest
import torch

from lintf.run.checkpoint_files import UnverifiedCheckpoint, load_checkpoint_file, sidecar_of
from lintf.run.cli import main
from tests.faults.helpers import one_paragraph
from tests.faults.test_checkpoint_faults import flip_a_byte_inside_a_tensor
from tests.generation.test_command import text_run


def test_random_bytes_are_not_a_checkpoint(tmp_path, capsys):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(bytes(range(7, 256)) * 20)
    err = one_paragraph(["generate", "--ckpt_path", str(junk), "--prompt", "in"], capsys, "lintf generate: error:")
    assert f"file {junk} is not a checkpoint: it begins with the bytes 07 08 09 0a" in err
    assert "mmap" not in err and "run code" not in err
    err = one_paragraph(["checkpoint", "upgrade", str(junk)], capsys, "lintf checkpoint upgrade: error:")
    assert f"file {junk} is not a checkpoint" in err and "run code" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.ckpt"]  # no upgraded copy, no run directory


def test_a_truncated_checkpoint_says_how_much_is_there(tmp_path, capsys):
    path, _, _ = text_run(tmp_path)
    whole = path.read_bytes()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole[: len(whole) // 2])  # copied without its .sha256: only the bytes can tell
    err = one_paragraph(["generate", "--ckpt_path", str(cut), "--prompt", "in"], capsys, "lintf generate: error:")
    assert f"checkpoint {cut} is truncated: {len(whole) // 2:,} of at least " in err and "Errno" not in err
    at_least = int(err.split("of at least ")[1].split(" bytes")[0].replace(",", ""))
    assert len(whole) // 2 < at_least <= len(whole)  # a lower bound of the real size
    assert not (tmp_path / "lightning_logs" / "version_1").exists()


def test_a_checkpoint_without_its_digest_is_said_to_be_unverified_once(tmp_path, capsys):
    path, task, _ = text_run(tmp_path)
    copy = tmp_path / "copied.ckpt"
    copy.write_bytes(path.read_bytes())
    flip_a_byte_inside_a_tensor(copy, task.token_embedding.weight.detach())
    with pytest.warns(UnverifiedCheckpoint) as said:
        main(["generate", "--ckpt_path", str(copy), "--prompt", "in", "--max_new_tokens", "3"])
        load_checkpoint_file(copy)
        assert torch.equal(load_checkpoint_file(path)["state_dict"]["token_embedding.weight"],
                           task.token_embedding.weight.detach())  # with its digest: verified, nothing said
    notes = [str(w.message) for w in said if w.category is UnverifiedCheckpoint]
    assert notes == [f"checkpoint {copy} has no copied.ckpt.sha256 beside it, so it was not verified against a digest "
                     "(copy the .sha256 file with a checkpoint to have it checked)"]
    assert not sidecar_of(copy).exists() and os.path.isfile(sidecar_of(path))
    assert capsys.readouterr().out.startswith("in")  # generated from it all the same
