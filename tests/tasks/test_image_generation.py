"""ImageGenerationTask: every image config trains (fast_dev_run) and predicts PNG grids on generated data."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lintf.models import EncoderConfig
from lintf.tasks import ImageGenerationTask
from tests.cli.helpers import REPO, quiet_trainer, run
from tests.tasks.recurrence import assert_steps_match_forward
from tests.data.test_images import make_mnist_dir, write_cifar_dir

TINY = ["--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
        "--model.init_args.encoder.n_heads", "2", "--model.init_args.encoder.d_ff", "32", "--data.init_args.batch_size", "2"]
TINY_ENCODER = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32)


def image_source(tmp_path, config: str) -> str:
    if "cifar" in config:
        write_cifar_dir(tmp_path / "cifar", np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3)).astype(np.uint8))
        return str(tmp_path / "cifar")
    make_mnist_dir(tmp_path / "mnist")
    return str(tmp_path / "mnist")


@pytest.mark.parametrize("config", ["mnist.yaml", "mnist_cpu.yaml", "cifar10.yaml"])
def test_image_config_trains_and_predicts_png_grids(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = ["--data.init_args.source_dir", image_source(tmp_path, config), "--data.init_args.data_dir", str(tmp_path / "d")]
    base = ["--config", str(REPO / "configs" / config), *TINY, *data, *quiet_trainer(tmp_path)]
    fitted = run(["fit", *base, "--trainer.fast_dev_run", "1"])
    assert fitted.trainer.state.finished
    predicted = run(["predict", *base, "--trainer.fast_dev_run", "1"])
    samples = sorted(p.name for p in tmp_path.rglob("samples/*.png"))
    # the fit's own grid (fit-step1.png), then predict's
    assert samples == ["completions-0000.png", "fit-step1.png", "originals-0000.png", "samples-0000.png"]
    assert predicted.trainer.state.finished


def test_completion_keeps_the_given_top_half_and_samples_bytes():
    task = ImageGenerationTask(vocab_size=256, max_length=15, encoder=TINY_ENCODER).eval()
    prompt = torch.randint(0, 256, (3, 16))
    completed = task.generate(prompt, known=8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(completed[:, :8], prompt[:, :8])
    assert completed.dtype == torch.int64 and completed.min() >= 0 and completed.max() <= 255
    assert not torch.equal(completed[:, 8:], prompt[:, 8:])


def test_untrained_uniform_categorical_head_scores_eight_bits_per_dim():
    task = ImageGenerationTask(vocab_size=256, max_length=15, encoder=TINY_ENCODER, head="categorical")
    torch.nn.init.zeros_(task.head.logits.weight), torch.nn.init.zeros_(task.head.logits.bias)
    batch = (torch.randint(0, 256, (2, 15)), torch.randint(0, 256, (2, 15)))
    assert task.nll(batch).mean().item() / math.log(2) == pytest.approx(8.0, abs=1e-5)


def test_unknown_head_is_named():
    with pytest.raises(KeyError, match="unknown output head 'pixelcnn'; known output head names: categorical"):
        ImageGenerationTask(head="pixelcnn")


@pytest.mark.slow
def test_predicted_grids_reach_weights_and_biases_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc: the logger goes offline
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    data = ["--data.init_args.source_dir", image_source(tmp_path, "mnist_cpu.yaml"),
            "--data.init_args.data_dir", str(tmp_path / "d")]
    cli = run(["predict", "--config", str(REPO / "configs" / "mnist_cpu.yaml"),
               "--config", str(REPO / "configs" / "logger" / "wandb.yaml"), *TINY, *data, *quiet_trainer(tmp_path),
               "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"), "--trainer.limit_predict_batches", "1"])
    cli.trainer.logger.experiment.finish()
    (wandb_run,) = (tmp_path / "logs" / "wandb").glob("offline-run-*")
    assert len(list(wandb_run.rglob("media/images/**/*.png"))) == 3  # originals, completions, samples
    written = tmp_path / "logs" / "lintf" / cli.trainer.logger.version / "samples"  # the run's directory
    assert sorted(p.name for p in written.glob("*.png")) == ["completions-0000.png", "originals-0000.png",
                                                            "samples-0000.png"]  # one batch: the limit is an int


def test_raster_positions_share_columns_and_step_equals_forward():
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0)
    task = ImageGenerationTask(vocab_size=256, max_length=11, encoder=encoder, positions="raster", row_bytes=4).eval()
    table = task.positions(11)
    assert table.shape == (11, 16) and task.positions.row_embedding.shape == (3, 16)
    torch.testing.assert_close(table[5] - table[1], table[6] - table[2])  # same row step, any column
    assert_steps_match_forward(task, torch.randint(0, 256, (2, 11)), tolerance=1e-5)


def test_raster_positions_need_a_row_length():
    with pytest.raises(ValueError, match="positions='raster' needs row_bytes"):
        ImageGenerationTask(positions="raster")


def test_completion_from_prefill_equals_stepping_the_given_half():
    torch.manual_seed(0)
    task = ImageGenerationTask(vocab_size=256, max_length=15, encoder=TINY_ENCODER).double().eval()
    prompt = torch.randint(0, 256, (3, 16))
    with torch.no_grad():
        completed = task.generate(prompt, known=8, generator=torch.Generator().manual_seed(1))
        generator, out = torch.Generator().manual_seed(1), prompt.clone()
        state = task.init_state(3)
        for position in range(15):  # the reference: every byte through step
            params, state = task.step(out[:, position], position, state)
            if position + 1 >= 8:
                out[:, position + 1] = task.head.sample(params, generator=generator)
    assert torch.equal(completed, out)
    with pytest.raises(ValueError, match="known must lie in 1..16"):
        task.generate(prompt, known=0)
