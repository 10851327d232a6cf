"""A disk that fills while torch's zip writer is saving: one paragraph and exit 1, no temporary left, the earlier
checkpoints intact (torch reports the failed write as its own RuntimeError after the OSError)."""

from __future__ import annotations

import errno
import io
import os

from lintf.run.checkpoint_files import load_checkpoint_file
from tests.cli.helpers import tiny
from tests.faults.test_run_faults import FIXED_LR, VALIDATE_EVERY_2, failure


class FillingFile(io.FileIO):
    """A file on a device with ``room`` bytes left: a write beyond them fails as the kernel's would (ENOSPC)."""

    room = 0

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def test_disk_filling_inside_torch_save_is_one_paragraph(tmp_path, capsys, monkeypatch):
    import lintf.run.checkpoint_files as checkpoint_files

    opened = []

    def open_on_a_filling_disk(path, mode="r", *args, **kwargs):
        if "w" not in mode:
            return open(path, mode, *args, **kwargs)
        opened.append(path)
        if len(opened) <= 2:  # best.ckpt and last.ckpt of the first validation fit
            return open(path, mode, *args, **kwargs)
        return FillingFile(path, "wb")

    monkeypatch.setenv("LINTF_THREADS", "1")  # no note on busy CPUs beside the paragraph
    FillingFile.room = 4096  # the zip writer's first records fit, the tensors do not
    monkeypatch.setattr(checkpoint_files, "open", open_on_a_filling_disk, raising=False)
    err = failure(tiny(tmp_path, "--trainer.max_steps", "4", *VALIDATE_EVERY_2, *FIXED_LR), capsys)
    directory = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints"
    assert f"could not write checkpoint {directory}" in err and "no space left on the device of" in err
    assert "PytorchStreamWriter" not in err and "unexpected pos" not in err
    assert sorted(p.name for p in directory.iterdir()) == ["best.ckpt", "best.ckpt.sha256", "last.ckpt",
                                                         "last.ckpt.sha256"]  # no temporary of the failed save
    assert load_checkpoint_file(directory / "last.ckpt")["global_step"] == 2  # verified against its digest
