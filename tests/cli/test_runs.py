"""End-to-end runs: saved configs reproduce, resume continues, predict copies, bf16 on CPU."""

import json
import math
import signal

import pytest
import torch
import yaml

from lintf.run.cli import LintfCLI
from tests.cli.helpers import COPY_YAML, InterruptAt, RecordSteps, run, tiny

STRONG_LR = ["--model.lr_scheduler", "null", "--model.optimizer.lr", "0.01"]


def final_weights(directory):
    return torch.load(directory / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def test_saved_config_reproduces_the_run(tmp_path):
    run(tiny(tmp_path, "--trainer.max_steps", "3", "--trainer.val_check_interval", "3"))
    first = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["model"]["init_args"]["encoder"]["d_model"] == 16 and saved["seed_everything"] == 0
    run(["fit", "--config", str(first / "config.yaml")])
    second = tmp_path / "lightning_logs" / "copy-linear" / "version_1"
    assert (second / "config.yaml").is_file()  # a second run never overwrites the first
    a, b = final_weights(first), final_weights(second)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_config_without_logger_does_not_collide(tmp_path):
    for _ in range(2):
        run(tiny(tmp_path, "--trainer.max_steps", "1", "--trainer.logger", "false", "--trainer.callbacks", "[]",
                 "--trainer.limit_val_batches", "0"))
    runs = tmp_path / "lightning_logs" / "copy-linear"
    assert (runs / "version_0" / "config.yaml").is_file() and (runs / "version_1" / "config.yaml").is_file()


def test_runs_started_together_get_distinct_directories(tmp_path):
    # Two runs that pick their version before either has written anything (the race of side-by-side
    # launches): Lightning's logger gives both version_0; the default logger reserves distinct ones.
    first, second = (run(tiny(tmp_path, "--trainer.max_steps", "1"), run_subcommand=False) for _ in range(2))
    directories = {cli.trainer.logger.log_dir for cli in (first, second)}
    assert directories == {str(tmp_path / "lightning_logs" / "copy-linear" / f"version_{n}") for n in (0, 1)}


def test_checkpointing_can_be_switched_off(tmp_path):
    cli = run(tiny(tmp_path, "--trainer.max_steps", "1", "--trainer.enable_checkpointing", "false"))
    assert cli.trainer.global_step == 1 and cli.trainer.checkpoint_callback is None
    assert not list(tmp_path.rglob("*.ckpt"))


def test_resume_continues_step_optimizer_and_loss(tmp_path):
    # validation (hence last.ckpt) every 2 steps; Ctrl-C after step 5
    args = tiny(tmp_path, *STRONG_LR, "--trainer.max_steps", "8", "--trainer.val_check_interval", "2",
                "--trainer.limit_val_batches", "1")
    interrupted = LintfCLI(args=args[1:], run=False)
    first = RecordSteps()
    interrupted.trainer.callbacks += [first, InterruptAt(5)]
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            interrupted.trainer.fit(interrupted.model, interrupted.datamodule)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores Ctrl-C after an interrupt
    assert [step for step, _ in first.losses] == [1, 2, 3, 4, 5]

    resumed = run([*args, "--ckpt_path", "last", "--trainer.callbacks+=tests.cli.helpers.RecordSteps"])
    second = next(cb for cb in resumed.trainer.callbacks if isinstance(cb, RecordSteps))
    assert second.first_global_step == 4 and second.first_optimizer_steps == 4  # last.ckpt at step 4
    assert resumed.trainer.global_step == 8
    assert second.losses[0][1] < first.losses[0][1] - 0.05  # starts from trained weights, not from scratch


def test_predict_writes_rows_and_exact_match(tmp_path, capsys):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"))
    cli = run(tiny(tmp_path, "--ckpt_path", "last", subcommand="predict"))
    directory = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "predictions"  # in the run of the checkpoint
    rows = [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and {"input", "target", "prediction", "exact_match", "token_accuracy"} <= rows[0].keys()
    metrics = json.loads((directory / "prediction_metrics.json").read_text())
    assert metrics["n"] == 16 and 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["exact_match"] == pytest.approx(sum(r["exact_match"] for r in rows) / 16)
    assert "exact_match" in capsys.readouterr().out
    assert cli.trainer.state.finished


def test_bf16_mixed_on_cpu(tmp_path):
    cli = run(tiny(tmp_path, "--trainer.precision", "bf16-mixed", "--trainer.max_steps", "3",
                   "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "3"))
    metrics = cli.trainer.callback_metrics
    assert math.isfinite(float(metrics["train/loss"])) and math.isfinite(float(metrics["val/loss"]))


def test_validate_and_test_subcommands(tmp_path):
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    for subcommand in ("validate", "test"):
        cli = run(tiny(tmp_path, "--ckpt_path", "best", subcommand=subcommand))
        assert 0.0 <= float(cli.trainer.callback_metrics[f"{'val' if subcommand == 'validate' else 'test'}/accuracy"]) <= 1


def test_samples_logged_to_tensorboard(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    run(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"))
    events = event_accumulator.EventAccumulator(str(tmp_path / "lightning_logs" / "copy-linear" / "version_0"))
    events.Reload()
    assert "samples/text_summary" in events.Tags()["tensors"]
    assert {"train/loss", "val/loss", "val/accuracy", "lr-AdamW"} <= set(events.Tags()["scalars"])


@pytest.mark.gpu
def test_fp16_mixed_on_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cli = run(tiny(tmp_path, "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.precision", "16-mixed",
                   "--trainer.max_steps", "3", "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "3"))
    assert math.isfinite(float(cli.trainer.callback_metrics["train/loss"]))


def test_whole_number_batch_limit_on_the_command_line_counts_batches():
    from lintf.run.cli import integer_batch_limits

    args = ["--trainer.limit_predict_batches", "1", "--trainer.limit_val_batches=4", "--trainer.limit_test_batches", "1.0"]
    assert integer_batch_limits(args) == {"limit_predict_batches": 1, "limit_val_batches": 4}
    cli = LintfCLI(args=["--config", COPY_YAML, *args], run=False)
    assert cli.trainer.limit_predict_batches == 1 and isinstance(cli.trainer.limit_predict_batches, int)
    assert cli.trainer.limit_test_batches == 1.0 and isinstance(cli.trainer.limit_test_batches, float)  # all of them
