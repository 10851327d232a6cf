"""W&B logger faults: disabled means no files, a self-hosted server is the one checked, Lightning's and
wandb.init's options reach them, and a missing wandb names the extra. All offline: HOME in tmp_path."""

from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path

import pytest
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

from lintf.run.loggers import WandbLogger, wandb_reachable
from tests.cli.helpers import COPY_YAML, REPO, run, tiny

WANDB_VARIABLES = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR",
                   "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR", "WANDB_PROJECT")


@pytest.fixture
def sandbox(monkeypatch, tmp_path) -> Path:
    """No W&B settings or credentials; HOME, the working and temporary directories all under tmp_path/box."""
    box = tmp_path / "box"
    for directory in ("home", "work", "tmp"):
        (box / directory).mkdir(parents=True)
    for name in WANDB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(box / "home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setattr(tempfile, "tempdir", str(box / "tmp"))
    monkeypatch.chdir(box / "work")
    return box


def files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if not path.is_dir())


@pytest.mark.parametrize("how", ["WANDB_MODE=disabled", "mode argument"])
def test_disabled_logs_nothing_and_writes_no_files(sandbox, monkeypatch, how):
    pytest.importorskip("wandb")
    if how == "WANDB_MODE=disabled":
        monkeypatch.setenv("WANDB_MODE", "disabled")
        logger = WandbLogger(save_dir=str(sandbox / "logs"))
    else:
        monkeypatch.setenv("WANDB_MODE", "offline")  # the argument wins over the environment
        logger = WandbLogger(save_dir=str(sandbox / "logs"), mode="disabled")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.experiment.log({"extra": 2.0})
    assert logger.experiment.settings.mode == "disabled"
    logger.finalize("success")
    logger.experiment.finish()
    assert files_under(sandbox) == [] and not list(sandbox.rglob("wandb")), files_under(sandbox)


class Listener:
    """A local TCP port standing in for a self-hosted W&B server."""

    def __enter__(self) -> int:
        self.socket = socket.create_server(("127.0.0.1", 0))
        return self.socket.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.socket.close()


def test_reachability_checks_the_self_hosted_server(sandbox, monkeypatch):
    with Listener() as port:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("WANDB_API_KEY", "local-key")
        assert wandb_reachable() == (True, "")
        monkeypatch.delenv("WANDB_API_KEY")
        (sandbox / "home" / ".netrc").write_text("machine 127.0.0.1\n  login user\n  password local-key\n")
        (sandbox / "home" / ".netrc").chmod(0o600)
        assert wandb_reachable() == (True, ""), "the key `wandb login --host` stored for the server counts"
    online, why = wandb_reachable(timeout=0.5)  # the server went away
    assert not online and why.startswith(f"127.0.0.1:{port} unreachable")


def test_a_malformed_base_url_is_named(sandbox, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.com:http")
    monkeypatch.setenv("WANDB_API_KEY", "key")
    with pytest.raises(ValueError, match=r"WANDB_BASE_URL='https://wandb.example.com:http' is not a server address; "
                                         r"expected e.g. https://wandb.example.com"):
        wandb_reachable()


def test_lightning_and_wandb_init_options_are_passed_through(sandbox, monkeypatch):
    pytest.importorskip("wandb")
    received = {}
    original = LightningWandbLogger.__init__

    def record(self, **kwargs):
        received.update(kwargs)
        original(self, **kwargs)

    monkeypatch.setattr(LightningWandbLogger, "__init__", record)
    logger = WandbLogger(project="proj", save_dir=str(sandbox / "logs"), id="run42", mode="offline", prefix="p",
                         checkpoint_name="weights", job_type="eval", notes="a note", group="g", tags=["t"],
                         init_kwargs={"config": {"lr": 0.1}, "resume": "never"})
    expected = {"project": "proj", "id": "run42", "prefix": "p", "checkpoint_name": "weights", "job_type": "eval",
                "notes": "a note", "group": "g", "tags": ["t"], "config": {"lr": 0.1}, "resume": "never",
                "mode": "offline", "offline": False}
    assert {key: received.get(key) for key in expected} == expected
    run_ = logger.experiment
    assert (run_.id, logger.version, run_.job_type, run_.notes, run_.config["lr"]) == ("run42", "run42", "eval",
                                                                                      "a note", 0.1)
    logger.log_metrics({"loss": 0.5}, step=0)
    assert run_.summary["p-loss"] == 0.5
    run_.finish()
    assert len(list((sandbox / "logs" / "wandb").glob("offline-run-*-run42"))) == 1


@pytest.mark.parametrize("arguments,message", [
    ({"init_kwargs": {"project": "x", "notes": "y"}}, "init_kwargs repeats project, notes, which the logger sets"),
    ({"version": "a", "id": "b"}, "version='a' and id='b' name two runs; give one of them"),
    ({"offline": False, "mode": "disabled"}, "offline=False contradicts mode='disabled'"),
    ({"mode": "sometimes"}, "mode='sometimes'; expected one of online, offline, disabled"),
])
def test_contradictory_options_are_refused_before_any_file(sandbox, arguments, message):
    pytest.importorskip("wandb")
    with pytest.raises(ValueError, match=message):
        WandbLogger(save_dir=str(sandbox / "logs"), **arguments)
    assert files_under(sandbox) == []


def test_unknown_wandb_mode_variable_is_named(sandbox, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ValueError, match="WANDB_MODE='ofline' is not a W&B mode; expected one of online, run, offline"):
        WandbLogger(save_dir=str(sandbox / "logs"))


def test_missing_wandb_names_the_extra(sandbox, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` does when it is not installed
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(ImportError, match=r'WandbLogger needs the wandb package .*pip install "lintf\[wandb\]"') as error:
        WandbLogger(save_dir=str(sandbox / "logs"))
    assert isinstance(error.value, ValueError)  # so `lintf fit` reports it in one paragraph
    assert files_under(sandbox) == []


def test_cli_without_wandb_stops_in_one_paragraph(sandbox, monkeypatch, capsys):
    from lintf.run.cli import main

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(SystemExit) as code:
        main(tiny(sandbox / "work", "--config", str(REPO / "configs" / "logger" / "wandb.yaml"),
                  "--trainer.logger.init_args.save_dir", str(sandbox / "logs"), config=COPY_YAML))
    err = capsys.readouterr().err
    assert code.value.code == 2 and 'pip install "lintf[wandb]"' in err and "Traceback" not in err
    assert not (sandbox / "logs").exists()


@pytest.mark.slow
def test_disabled_run_writes_checkpoints_but_no_wandb_files(sandbox, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli = run(tiny(sandbox / "work", "--config", str(REPO / "configs" / "logger" / "wandb.yaml"),
                   "--trainer.logger.init_args.save_dir", str(sandbox / "logs"),
                   "--trainer.logger.init_args.job_type", "smoke", "--trainer.logger.init_args.init_kwargs",
                   "{config: {note: tiny}}", "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
                   config=COPY_YAML))
    experiment = cli.trainer.logger.experiment
    experiment.finish()  # wandb keeps one run per process: the next test must start its own
    assert experiment.settings.mode == "disabled"
    written = files_under(sandbox)
    assert not [name for name in written if "wandb" in name], written
    assert any(name.endswith("last.ckpt") for name in written)
