"""PredictionWriter's result line starts a line of its own, after the progress bar has ended its line."""

from __future__ import annotations

from tests.cli.helpers import run, tiny

TQDM = "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar"


def test_the_result_line_follows_the_progress_bar(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"))
    capsys.readouterr()
    run(tiny(tmp_path, "--ckpt_path", "last", "--trainer.enable_progress_bar", "true", TQDM, subcommand="predict"))
    out = capsys.readouterr().out
    bar, report = out.index("Predicting"), out.index("predicted 16 sequences: exact_match")
    assert bar < report and out[report - 1] == "\n", repr(out[max(0, report - 80):report + 20])
