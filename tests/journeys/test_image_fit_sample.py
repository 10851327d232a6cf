"""An image model's fit ends with a small grid of what it draws, saved in the run and named under the ``fit:``
line: the grid ``lintf generate`` draws from the run's last checkpoint, cut short at the time limit, and never
the run's failure.

The model is configs/mnist_cpu.yaml's, shrunk to seconds, on a tiny MNIST-format folder of random images.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lintf.run.callbacks import fit_image_sample
from lintf.run.cli import main
from tests.cli.helpers import REPO, quiet_trainer
from tests.data.test_images import make_mnist_dir

MNIST_CPU = str(REPO / "configs" / "mnist_cpu.yaml")
TINY = ["--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
        "--model.init_args.encoder.n_heads", "2", "--model.init_args.encoder.d_ff", "32",
        "--data.init_args.batch_size", "2", "--data.init_args.val_fraction", "0.25"]
RUN = ("lightning_logs", "image_generation-linear-mnist", "version_0")
LINE = re.compile(r"^image sample \(4 images drawn from the first byte 0 at temperature 1, seed 0(.*)\): (.*)$",
                  re.MULTILINE)


def fit_images(tmp_path: Path) -> None:
    """``lintf fit`` of a tiny image model for 2 steps under ``tmp_path``."""
    make_mnist_dir(tmp_path / "mnist")
    data = ["--data.init_args.source_dir", str(tmp_path / "mnist"), "--data.init_args.data_dir", str(tmp_path / "d")]
    try:
        main(["fit", "--config", MNIST_CPU, *TINY, *data, *quiet_trainer(tmp_path), "--trainer.max_steps", "2",
              "--trainer.limit_val_batches", "1"])
    except SystemExit as error:
        pytest.fail(f"lintf fit exited with {error.code}")


def grid_pixels(path: Path, side: int) -> np.ndarray:
    """The top ``side`` x ``side`` pixels of a PNG grid: the images, without the caption under them."""
    return np.asarray(Image.open(path))[:side, :side]


def test_an_image_fit_ends_with_the_grid_its_checkpoint_generates(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fit_image_sample, "TIME_LIMIT", 600.0)  # whole images, however busy the machine
    fit_images(tmp_path)
    out = capsys.readouterr().out
    match = LINE.search(out)
    assert match is not None and match[1] == "", out
    grid = Path(match[2])
    run = tmp_path.joinpath(*RUN)
    assert grid == run / "samples" / "fit-step2.png" and grid.is_file()
    assert out.index("fit: 2 steps") < out.index("image sample")  # under the fit: line
    # the same images from the run's last checkpoint, by `lintf generate` (4 samples, seed 0, from the byte 0)
    main(["generate", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--num_samples", "4"])
    generated = Path(capsys.readouterr().out.strip())
    assert generated == run / "samples" / "generate-seed0.png"
    side = Image.open(generated).width  # 2 x 2 images of 28 pixels, 2 apart, enlarged: a square above the caption
    assert np.array_equal(grid_pixels(grid, side), grid_pixels(generated, side))
    assert len(np.unique(grid_pixels(grid, side))) > 2  # drawn bytes, not a blank grid


def test_the_grid_stops_at_the_time_limit_and_says_how_far_it_got(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fit_image_sample, "TIME_LIMIT", 0.0)  # out of time once the first byte is drawn
    fit_images(tmp_path)
    out = capsys.readouterr().out
    match = LINE.search(out)
    assert match is not None and match[1] == "; 1 of 783 bytes drawn within the 0 s limit, the rest left black", out
    assert Path(match[2]).is_file()


def test_a_failed_grid_is_one_line_and_the_run_succeeds(tmp_path, capsys, monkeypatch):
    from lintf.tasks import ImageGenerationTask

    def broken(self, ids):
        raise RuntimeError("no state for you")

    monkeypatch.setattr(ImageGenerationTask, "prefill", broken)
    fit_images(tmp_path)
    out = capsys.readouterr().out
    assert "image sample: not drawn (RuntimeError: no state for you)" in out.splitlines()
    assert tmp_path.joinpath(*RUN, "checkpoints", "last.ckpt").is_file()


def test_generate_from_a_copied_image_checkpoint_writes_into_a_named_run(tmp_path, capsys, monkeypatch):
    fit_images(tmp_path / "trained")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    for suffix in ("", ".sha256"):  # a checkpoint and its digest, copied out of the run
        shutil.copy(tmp_path.joinpath("trained", *RUN, "checkpoints", f"last.ckpt{suffix}"),
                    elsewhere / f"model.ckpt{suffix}")
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    main(["generate", "--ckpt_path", "model.ckpt"])
    out, err = capsys.readouterr()
    run = elsewhere / "lightning_logs" / "image_generation-linear-mnist" / "version_0"
    assert Path(out.strip()) == run / "samples" / "generate-seed0.png" and f"run directory: {run}" in err
    assert sorted(p.name for p in (elsewhere / "lightning_logs").iterdir()) == ["image_generation-linear-mnist"]
