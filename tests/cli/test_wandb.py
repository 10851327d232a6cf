"""configs/logger/wandb.yaml: without a key or network the run logs offline and finishes."""

import time

import pytest
import yaml

from lintf.run.loggers import WandbLogger, wandb_reachable
from tests.cli.helpers import COPY_YAML, REPO, run, tiny

pytest.importorskip("wandb")


@pytest.fixture
def no_wandb_credentials(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_no_anonymous_setting_reaches_wandb(no_wandb_credentials, tmp_path):
    # Lightning passes anonymous=None to wandb.init, and wandb warns that the setting does nothing.
    from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

    assert "anonymous" in LightningWandbLogger(save_dir=str(tmp_path), offline=True)._wandb_init
    assert "anonymous" not in WandbLogger(save_dir=str(tmp_path), mode="offline")._wandb_init
    assert WandbLogger(save_dir=str(tmp_path), mode="offline", anonymous=True)._wandb_init["anonymous"] == "allow"


def test_no_key_means_offline(no_wandb_credentials):
    online, why = wandb_reachable()
    assert not online and "API key" in why


@pytest.mark.slow
def test_wandb_config_runs_offline(no_wandb_credentials, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    cli = run(tiny(
        tmp_path, "--config", str(REPO / "configs" / "logger" / "wandb.yaml"),
        "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"),
        "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
        config=COPY_YAML,
    ))
    assert time.monotonic() - start < 120
    logger = cli.trainer.logger
    assert isinstance(logger, WandbLogger) and logger.experiment.settings.mode in ("offline", "dryrun")
    runs = list((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run_dir = tmp_path / "logs" / "lintf" / logger.version  # config beside the checkpoints
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["logger"]["class_path"] == "lintf.run.loggers.WandbLogger"
    logger.experiment.finish()
