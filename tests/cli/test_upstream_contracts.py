"""The private Lightning and argparse members lintf overrides or reads still exist and still do their job, and the
public behaviour lintf relies on in their stead still holds.

Each check fails loudly if an upgrade renames or bypasses one, instead of lintf silently losing the
behaviour it adds there (named in the comment at each use).
"""

from __future__ import annotations

import argparse
import csv
import inspect

import pytest
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from lintf.models import EncoderConfig
from lintf.run.loggers import AppendingExperimentWriter, CSVLogger, ReservedVersionTensorBoardLogger
from lintf.run.parsers import LintfArgumentParser
from lintf.tasks import CopyTask


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


def test_csv_logger_picks_its_version_through_get_next_version(tmp_path):
    assert list(inspect.signature(LightningCSVLogger._get_next_version).parameters) == ["self"]
    (tmp_path / "runs" / "version_0").mkdir(parents=True)
    logger = CSVLogger(save_dir=str(tmp_path), name="runs")
    assert logger.version == 1 and (tmp_path / "runs" / "version_1").is_dir()


def test_lightning_s_csv_writer_deletes_metrics_csv_in_check_log_dir_exists(tmp_path):
    # lintf's AppendingExperimentWriter overrides _check_log_dir_exists (private) to keep a continued run's rows.
    for writer_class, rows_kept in ((ExperimentWriter, False), (AppendingExperimentWriter, True)):
        directory = tmp_path / writer_class.__name__
        directory.mkdir()
        (directory / "metrics.csv").write_text("step,train/loss\n0,2.5\n")
        writer = writer_class(str(directory))
        writer.log_metrics({"test/loss": 2.0}, step=1)
        writer.save()
        with open(directory / "metrics.csv", newline="") as file:
            rows = list(csv.DictReader(file))
        assert ([row["train/loss"] for row in rows if row.get("train/loss")] == ["2.5"]) == rows_kept
        assert [row["test/loss"] for row in rows if row.get("test/loss")] == ["2.0"]


def test_argparse_lists_its_option_strings():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer.max_steps")
    assert "--trainer.max_steps" in parser._option_string_actions


def test_subcommands_are_listed_with_the_help_of_their_choices_actions(capsys):
    # LintfCLI.setup_parser gives fit/validate/test/predict their line of `lintf --help` through _choices_actions.
    parser = LintfArgumentParser(prog="lintf")
    action = parser.add_subcommands()
    assert parser.subcommands_action is action
    action.add_subcommand("fit", LintfArgumentParser(), help="Lightning's text.")
    [choice] = action._choices_actions
    assert choice.dest == "fit" and choice.help == "Lightning's text."
    choice.help = "lintf's text."
    parser.print_help()
    assert "lintf's text." in capsys.readouterr().out


def test_a_lightning_module_outside_a_trainer_says_so_with_a_runtime_error():
    # TransformerTask.attached_datamodule reads the public LightningModule.trainer, which raises while unattached.
    task = CopyTask(12, 24, EncoderConfig(d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        LightningModule.trainer.fget(task)
    assert task.attached_datamodule is None
    data = LightningDataModule()
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(task)
    task.trainer = trainer
    assert task.attached_datamodule is None  # a trainer without data
    trainer.datamodule = data
    assert task.attached_datamodule is data


def test_lightning_cli_merges_checkpoint_settings_through_parse_ckpt_path_private():
    # LintfCLI._parse_ckpt_path replaces Lightning's unchecked merge of a checkpoint's hyper-parameters: it
    # must still be the step between parsing and instantiating, or the checks would be skipped.
    source = inspect.getsource(LightningCLI.__init__)
    parse, merge, build = (source.index(call) for call in
                           ("self.parse_arguments(", "self._parse_ckpt_path()", "self.instantiate_classes()"))
    assert parse < merge < build
    assert list(inspect.signature(LightningCLI._parse_ckpt_path).parameters) == ["self"]
