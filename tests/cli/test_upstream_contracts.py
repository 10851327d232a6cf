"""The private Lightning and argparse members lintf overrides or reads still exist and still do their job.

Each check fails loudly if an upgrade renames or bypasses one, instead of lintf silently losing the
behaviour it adds there (named in the comment at each use).
"""

from __future__ import annotations

import argparse
import inspect

from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger

from lintf.run.loggers import ReservedVersionTensorBoardLogger


def test_lightning_cli_builds_the_trainer_through_instantiate_trainer_private():
    parameters = list(inspect.signature(LightningCLI._instantiate_trainer).parameters)
    assert parameters == ["self", "config", "callbacks"]
    assert "self._instantiate_trainer(" in inspect.getsource(LightningCLI.instantiate_trainer)


def test_tensorboard_logger_picks_its_version_through_get_next_version(tmp_path):
    assert list(inspect.signature(TensorBoardLogger._get_next_version).parameters) == ["self"]
    (tmp_path / "runs" / "version_0").mkdir(parents=True)
    logger = ReservedVersionTensorBoardLogger(save_dir=str(tmp_path), name="runs")
    assert logger.version == 1  # one past the existing directory, reserved on disk
    assert (tmp_path / "runs" / "version_1").is_dir() and not (tmp_path / "runs" / "runs").exists()


def test_argparse_lists_its_option_strings():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer.max_steps")
    assert "--trainer.max_steps" in parser._option_string_actions


def test_lightning_cli_merges_checkpoint_settings_through_parse_ckpt_path_private():
    # LintfCLI._parse_ckpt_path replaces Lightning's unchecked merge of a checkpoint's hyper-parameters: it
    # must still be the step between parsing and instantiating, or the checks would be skipped.
    source = inspect.getsource(LightningCLI.__init__)
    parse, merge, build = (source.index(call) for call in
                           ("self.parse_arguments(", "self._parse_ckpt_path()", "self.instantiate_classes()"))
    assert parse < merge < build
    assert list(inspect.signature(LightningCLI._parse_ckpt_path).parameters) == ["self"]
