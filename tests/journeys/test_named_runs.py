"""Run directories say what the run is: ``lightning_logs/copy-linear/version_0``, a counter per name.

The journeys run ``lintf`` (``main``, the console script's function) on the tiny copy task under
tmp_path as a user types the commands; the names themselves are checked against names written out by hand.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

from lintf.layout.run_names import run_name
from lintf.run.cli import main
from tests.cli.helpers import REPO, run, tiny

SHORT = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]


def lintf(*args: str) -> None:
    try:
        main(list(args))
    except SystemExit as error:
        pytest.fail(f"lintf {' '.join(args[:1])} exited with {error.code}")


def printed_run_directories(out: str) -> list[str]:
    return re.findall(r"^run directory: (.*)$", out, flags=re.MULTILINE)


@pytest.mark.parametrize(("model", "data", "expected"), [
    ({"class_path": "lintf.tasks.CopyTask", "init_args": {"encoder": {"attention": "linear"}}},
     {"class_path": "lintf.data.CopyData", "init_args": {"n_symbols": 10}}, "copy-linear"),
    ({"class_path": "lintf.tasks.StreamLanguageModelTask", "init_args": {"encoder": {"attention": "linear"}}},
     {"class_path": "lintf.data.TextStreamData", "init_args": {"path": "texts/mytext.txt"}}, "stream_lm-linear-mytext"),
    ({"class_path": "lintf.tasks.StreamLanguageModelTask",
      "init_args": {"encoder": {"attention": ["gated_delta_net", "gated_delta_net", "gated_delta_net", "local"]}}},
     {"class_path": "lintf.data.TextStreamData", "init_args": {"path": "kjv"}}, "stream_lm-gated_delta_net+local-kjv"),
    ({"class_path": "lintf.tasks.ImageGenerationTask",
      "init_args": {"encoder": {"attention": "my_plugin.MyAttention"}}},
     {"class_path": "lintf.data.ImageData", "init_args": {"dataset": "mnist"}}, "image_generation-MyAttention-mnist"),
    ({"class_path": "lintf.asr.ASRTask", "init_args": {"encoder": {"attention": "softmax"}}},
     {"class_path": "lintf.asr.SpeechData", "init_args": {"train_manifest": "data/speech/synth/train.jsonl"}},
     "asr-softmax-synth"),
    ({"class_path": "lintf.tasks.AssociativeRecallTask", "init_args": {"encoder": {"attention": "a b/c"}}},
     {"class_path": "lintf.data.AssociativeRecallData", "init_args": {}}, "associative_recall-a_b_c"),
])
def test_a_run_is_named_after_its_task_attention_and_data(model, data, expected):
    assert run_name(model, data) == expected


def test_runs_are_counted_per_name_and_last_finds_the_newest_of_any_name(tmp_path, monkeypatch, capsys):
    lintf(*tiny(tmp_path, *SHORT))
    lintf(*tiny(tmp_path, *SHORT, "--model.optimizer.init_args.lr", "0.01"))  # same name, next version
    lintf(*tiny(tmp_path, *SHORT, "--model.encoder.attention", "softmax"))
    runs = tmp_path / "lightning_logs"
    assert sorted(str(p.relative_to(runs)) for p in runs.glob("*/version_*")) == [
        "copy-linear/version_0", "copy-linear/version_1", "copy-softmax/version_0"]
    # 'last' without a config: the newest run's checkpoint, its settings read from that run's config.yaml
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lintf("test", "--ckpt_path", "last")
    assert not [w for w in caught if "args parameter" in str(w.message)]  # one command, not "args and sys.argv"
    out, err = capsys.readouterr()
    softmax = runs / "copy-softmax" / "version_0"
    assert f"settings from {softmax / 'config.yaml'}" in err and printed_run_directories(out) == [str(softmax)] * 2
    assert (softmax / "config-test.yaml").is_file()
    # a config's 'last' is its own experiment's: the linear runs' newest, version_1
    lintf(*tiny(tmp_path, "--trainer.max_steps", "4", "--ckpt_path", "last", subcommand="fit"))
    out = capsys.readouterr().out
    assert printed_run_directories(out)[0] == str(runs / "copy-linear" / "version_1")


def test_last_still_finds_a_run_of_the_older_layout(tmp_path, monkeypatch, capsys):
    lintf(*tiny(tmp_path, *SHORT))
    older = tmp_path / "lightning_logs" / "version_0"  # where runs went before they had names
    os.rename(tmp_path / "lightning_logs" / "copy-linear" / "version_0", older)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    lintf("predict", "--ckpt_path", "last")
    out, err = capsys.readouterr()
    assert f"settings from {older / 'config.yaml'}" in err and printed_run_directories(out) == [str(older)] * 2
    assert (older / "predictions" / "predictions.jsonl").is_file()


def test_a_logger_given_a_name_or_version_keeps_it(tmp_path):
    csv = ["--trainer.logger", "lintf.run.loggers.CSVLogger"]
    named = run(tiny(tmp_path, *csv, "--trainer.logger.name", "mine"), run_subcommand=False)
    assert named.trainer.logger.log_dir == str(tmp_path / "mine" / "version_0")
    versioned = run(tiny(tmp_path, *csv, "--trainer.logger.version", "baseline"), run_subcommand=False)
    assert versioned.trainer.logger.log_dir == str(tmp_path / "lightning_logs" / "baseline")
    unnamed = run(tiny(tmp_path, *csv), run_subcommand=False)
    assert unnamed.trainer.logger.log_dir == str(tmp_path / "lightning_logs" / "copy-linear" / "version_0")


def test_compare_labels_runs_by_name_and_version(tmp_path):
    lintf(*tiny(tmp_path, *SHORT))
    lintf(*tiny(tmp_path, *SHORT, "--model.encoder.attention", "softmax"))
    runs = ["lightning_logs/copy-linear/version_0", "lightning_logs/copy-softmax/version_0"]
    done = subprocess.run([sys.executable, "-m", "lintf_cli", "compare", *runs, "--output", "runs.png"], check=False,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr  # long labels fit the plot
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = next(index for index, line in enumerate(lines) if line.split()[:1] == ["run"])
    assert [line.split()[0] for line in lines[header + 1:header + 3]] == [run[15:] for run in runs], done.stdout
    assert (tmp_path / "runs.png").is_file()
