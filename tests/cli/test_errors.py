"""Bad input ends in one paragraph naming what was wrong and what is allowed (no traceback)."""

import pytest
import torch

import lintf
from lintf.run.cli import main
from tests.cli.helpers import tiny


def error_of(args, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "usage:" not in err
    assert len(err.splitlines()) == 1, err  # one paragraph
    return err


def test_unknown_attention_lists_known_names(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.attention", "performer"), capsys)
    assert "unknown attention 'performer'" in err
    assert f"known attention names: {', '.join(lintf.list_attentions())}." in err
    assert not list(tmp_path.iterdir())  # failed before anything ran


def test_unknown_feature_map(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.feature_map", "eluu"), capsys)
    assert "unknown feature map 'eluu'" in err and "elu" in err


def test_attention_by_class_path(tmp_path):
    from lintf.run.cli import LintfCLI

    args = tiny(tmp_path, "--model.encoder.attention", "lintf.attention.SoftmaxAttention")[1:]
    assert LintfCLI(args=args, run=False).model.hparams.encoder["attention"] == "softmax"


def test_unregistered_class_is_refused(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.attention", "torch.nn.Linear"), capsys)
    assert "'torch.nn.Linear' is not a registered attention" in err


def test_typo_in_model_option_suggests(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.d_modle", "8"), capsys)
    assert "'d_modle' is not accepted" in err and "Did you mean 'd_model'?" in err and "n_layers" in err


def test_typo_in_yaml_suggests(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("trainer:\n  max_step: 3\n")
    err = error_of(tiny(tmp_path, "--config", str(config)), capsys)
    assert "trainer.max_step" in err and "Did you mean 'trainer.max_steps'?" in err


def test_no_abbreviated_options(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--trainer.max_step", "3"), capsys)
    assert "unrecognized arguments: --trainer.max_step" in err


def test_wrong_attention_argument(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.attention", "reformer", "--model.encoder.attention_kwargs", "{n_hash: 2}"), capsys)
    assert "got unknown argument(s) n_hash" in err and "n_hashes" in err


def test_feature_map_on_an_attention_without_one(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--model.encoder.attention", "softmax", "--model.encoder.feature_map", "elu"), capsys)
    assert "takes no feature map" in err and "linear" in err


def test_inconsistent_data(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--data.max_length", "2"), capsys)
    assert "max_length=2" in err


def test_missing_checkpoint(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--ckpt_path", str(tmp_path / "nope.ckpt")), capsys)
    assert "checkpoint not found" in err and "'last'" in err


def test_no_last_checkpoint_yet(tmp_path, capsys):
    err = error_of(tiny(tmp_path, "--ckpt_path", "last"), capsys)
    assert "no last.ckpt written by lintf.tasks.copy.CopyTask" in err


def test_checkpoint_of_another_task(tmp_path, capsys):
    foreign = tmp_path / "other.ckpt"
    torch.save({"lintf_task": "lintf.tasks.image.ImageTask", "state_dict": {}}, foreign)
    err = error_of(tiny(tmp_path, "--ckpt_path", str(foreign), subcommand="predict"), capsys)
    assert "written by task lintf.tasks.image.ImageTask" in err and "uses lintf.tasks.copy.CopyTask" in err


def test_not_a_checkpoint(tmp_path, capsys):
    junk = tmp_path / "junk.ckpt"
    junk.write_text("not a checkpoint")
    err = error_of(tiny(tmp_path, "--ckpt_path", str(junk)), capsys)
    assert f"file {junk} is not a checkpoint" in err


def test_help_lists_registered_names(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"registered attentions: {', '.join(lintf.list_attentions())}" in out


def test_console_script_reports_without_traceback(tmp_path):
    import shutil
    import subprocess

    if shutil.which("lintf") is None:
        pytest.skip("console script not installed (pip install -e .)")
    result = subprocess.run(
        ["lintf", *tiny(tmp_path, "--model.encoder.attention", "performer")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "unknown attention 'performer'" in result.stderr and "Traceback" not in result.stderr
