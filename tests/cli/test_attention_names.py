"""Every registered attention is one CLI flag away: `--model.encoder.attention <name>` on the copy config.

Parametrized over the registry, so an attention a plugin registers is run here too: causal ones
train for one fast_dev_run batch, attentions without a causal form are refused before training
with a message that lists the causal ones.
"""

from __future__ import annotations

import pytest

import lintf
from lintf.run.cli import main
from lintf.registry import ATTENTIONS
from tests.cli.helpers import run, tiny

CAUSAL = [name for name in lintf.list_attentions() if getattr(ATTENTIONS.get(name), "supports_causal", True)]
NON_CAUSAL = [name for name in lintf.list_attentions() if name not in CAUSAL]


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_attention_trains_from_the_cli(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = run(tiny(tmp_path, "--model.encoder.attention", name, "--trainer.fast_dev_run", "1"))
    assert cli.trainer.state.finished
    assert all(type(layer.attention.attention) is ATTENTIONS.get(name) for layer in cli.model.encoder.layers)
    metrics = cli.trainer.callback_metrics
    assert bool(metrics["train/loss"].isfinite()) and bool(metrics["val/loss"].isfinite()), f"{name}: {metrics}"


@pytest.mark.parametrize("name", NON_CAUSAL)
def test_non_causal_attention_is_refused_by_the_copy_task(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(tmp_path, "--model.encoder.attention", name, "--trainer.fast_dev_run", "1"))
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert name in message and "causal" in message and CAUSAL[0] in message
