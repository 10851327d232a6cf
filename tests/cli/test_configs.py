"""Every YAML in configs/ parses and survives fast_dev_run (overlays on top of copy.yaml)."""

import pytest
import yaml

from lintf.run.cli import LintfCLI
from tests.cli.helpers import COPY_YAML, REPO, TINY_DATA, TINY_MODEL, quiet_trainer, run

# Speech, image and text-stream configs read real corpora; tests/asr/test_asr_task.py,
# tests/tasks/test_stream_lm.py and
# tests/tasks/test_image_generation.py run them on generated ones.
OWN_TESTS = ("asr_", "mnist", "cifar10", "stream_lm")
CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").rglob("*.yaml") if not p.name.startswith(OWN_TESTS))


def stack(config: str) -> list[str]:
    """Experiments (with a model class) stand alone; overlays go on top of copy.yaml."""
    full = "class_path" in ((yaml.safe_load((REPO / config).read_text()) or {}).get("model") or {})
    return ["--config", str(REPO / config)] if full else ["--config", COPY_YAML, "--config", str(REPO / config)]


def test_configs_exist():
    assert "configs/copy.yaml" in CONFIGS and "configs/copy_paper.yaml" in CONFIGS


@pytest.mark.parametrize("config", CONFIGS)
def test_config_parses(config, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cli = LintfCLI(args=[*stack(config), "--data.train_size", "8", "--trainer.default_root_dir", str(tmp_path)], run=False)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size  # linked, not typed twice


@pytest.mark.parametrize("config", CONFIGS)
def test_config_fast_dev_run(config, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    # sizes shrink so the paper's setting runs in seconds; everything else is the YAML's.
    cli = run(["fit", *stack(config), *TINY_MODEL, *TINY_DATA, *quiet_trainer(tmp_path), "--trainer.fast_dev_run", "1"])
    assert cli.trainer.state.finished


def test_print_config_merges_configs_in_order(capsys):
    from lintf.run.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", COPY_YAML, "--config", str(REPO / "configs" / "attention" / "reformer.yaml"),
              "--print_config"])
    assert exit_info.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["class_path"] == "lintf.tasks.CopyTask"
    encoder = config["model"]["init_args"]["encoder"]
    assert encoder["attention"] == "reformer"  # the later file wins
    assert encoder["attention_kwargs"] == {"n_hashes": 4, "chunk_size": 32}
    assert encoder["d_model"] == 64  # the earlier file still applies
