"""A checkpoint or config from someone else never runs code: every class path is checked before anything is built.

Each payload would touch a marker file if it ran; each command must end in one paragraph, exit 2, and
leave the marker absent.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
import yaml

from lintf.run.checkpoint_files import load_checkpoint_file
from lintf.run.cli import main
from tests.cli.helpers import run, tiny
from tests.faults.test_cli_faults import lintf_error

SHORT = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]


def shell_payload(marker) -> dict:
    return {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}


def with_digest(path, checkpoint: dict) -> None:
    """``checkpoint`` saved at ``path`` with a valid sha256 sidecar, as a careful forger would."""
    torch.save(checkpoint, path)
    path.with_name(path.name + ".sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "  x\n")


@pytest.fixture
def trained(tmp_path):
    """A real tiny run's last.ckpt (read as plain data) and its directory."""
    run(tiny(tmp_path, *SHORT))
    path = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    return load_checkpoint_file(path), path


@pytest.mark.parametrize("key", ["optimizer", "lr_scheduler"])
@pytest.mark.parametrize("as_last", [False, True])
def test_checkpoint_naming_a_function_runs_nothing(key, as_last, trained, tmp_path, capsys, monkeypatch):
    checkpoint, path = trained
    marker = tmp_path / "ran"
    checkpoint["hyper_parameters"][key] = shell_payload(marker)
    with_digest(path, checkpoint)  # replaces the run's own last.ckpt, so --ckpt_path last finds it
    monkeypatch.chdir(tmp_path)
    err = lintf_error(tiny(tmp_path, "--ckpt_path", "last" if as_last else str(path), subcommand="predict"), capsys)
    assert f"hyper-parameters that lintf never writes ({key})" in err and str(path) in err
    assert not marker.exists()


def test_class_path_hidden_in_checkpoint_plain_data_runs_nothing(trained, tmp_path, capsys):
    checkpoint, path = trained
    marker = tmp_path / "ran"
    checkpoint["hyper_parameters"]["head_kwargs"] = {"inner": shell_payload(marker)}
    with_digest(path, checkpoint)
    err = lintf_error(tiny(tmp_path, "--ckpt_path", str(path), subcommand="test"), capsys)
    assert "names class_path 'os.system' at head_kwargs.inner" in err and not marker.exists()


@pytest.mark.parametrize("option,expected", [
    ("optimizer", "model.init_args.optimizer in the configuration names 'os.system', which is not a class"),
    ("lr_scheduler", "model.init_args.lr_scheduler in the configuration names 'os.system', which is not a class"),
])
def test_config_naming_a_function_runs_nothing(option, expected, tmp_path, capsys):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    config.write_text(yaml.safe_dump({"model": {"init_args": {option: shell_payload(marker)}}}))
    err = lintf_error(tiny(tmp_path, "--config", str(config), subcommand="validate"), capsys)
    assert expected in err and not marker.exists()


def test_config_naming_another_class_as_optimizer_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(tmp_path, "--model.optimizer", "{class_path: subprocess.Popen, init_args: {args: true}}"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert "model.optimizer" in err and "Expected 'subprocess.Popen' to be a subclass of <class 'Optimizer'>" in err


def test_class_path_in_config_plain_data_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    config.write_text(yaml.safe_dump({"model": {"init_args": {"encoder": {"attention_kwargs": {
        "x": shell_payload(marker)}}}}}))
    err = lintf_error(tiny(tmp_path, "--config", str(config)), capsys)
    assert "model.init_args.encoder.attention_kwargs.x in the configuration names class_path 'os.system'" in err
    assert "holds plain data" in err and not marker.exists()


def test_optimizer_and_schedule_classes_still_work(tmp_path):
    cli = run(tiny(tmp_path, "--model.optimizer", "torch.optim.SGD", "--model.lr_scheduler",
                   "{class_path: torch.optim.lr_scheduler.StepLR, init_args: {step_size: 1}}", "--trainer.max_steps", "1",
                   "--trainer.limit_val_batches", "0"))
    assert isinstance(cli.trainer.optimizers[0], torch.optim.SGD) and cli.trainer.global_step == 1
