"""benchmarks.training_gpu: its arguments, its refusal without a GPU, and a run of its cells on the CPU."""

import json
import subprocess
import sys

import pytest
import torch

from benchmarks import training_gpu


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--precisions", "fp8"], "argument --precisions: invalid choice: 'fp8'"),
        (["--attentions", "flash"], "argument --attentions: invalid choice: 'flash'"),
        (["--lengths", "0"], "0 is not allowed: give a whole number of at least 1"),
        (["--device", "mps"], "--device: 'mps' is not allowed; give cuda (cuda:N) or cpu"),
        (["--device", "nonsense"], "--device: 'nonsense' is not allowed; give cuda (cuda:N) or cpu"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        training_gpu.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_cuda_it_exits_non_zero_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.training_gpu", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "benchmarks.training_gpu needs a CUDA device (none is visible to torch here; --device cpu checks the script)"]
    assert not list(tmp_path.iterdir())


def test_cells_on_the_cpu_report_tokens_per_second_against_softmax(tmp_path):
    training_gpu.main(["--device", "cpu", "--d-model", "32", "--lengths", "16", "--precisions", "32-true",
                       "--attentions", "linear", "softmax", "--compile", "off", "--tokens", "64", "--warmup", "1",
                       "--steps", "2", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "training_gpu.json").read_text())
    assert report["finished"] and [r["attention"] for r in report["rows"]] == ["linear", "softmax"]
    for row in report["rows"]:
        assert row["tokens"] == 64 and len(row["steps"]) == 2 and row["tokens_per_second"] > 0
    lines = (tmp_path / "training_gpu.md").read_text().splitlines()
    cells = lines[-1].split(" | ")
    assert cells[:4] == ["| 32-true", "off", "16", "4"]
    assert cells[-1].endswith("(1.00x) |") and "x)" in cells[-2]


def test_a_failing_cell_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    def refuse(d_model, length, attention):
        if attention == "linear":
            raise RuntimeError("no kernel for this cell")
        return real(d_model, length, attention)

    real = training_gpu.build_task
    monkeypatch.setattr(training_gpu, "build_task", refuse)
    training_gpu.main(["--device", "cpu", "--d-model", "32", "--lengths", "16", "--precisions", "32-true",
                       "--attentions", "linear", "softmax", "--compile", "off", "--tokens", "32", "--warmup", "1",
                       "--steps", "1", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "training_gpu.json").read_text())["rows"]
    assert rows[0] == {"precision": "32-true", "length": 16, "compile": "off", "attention": "linear",
                       "error": "RuntimeError"}
    assert rows[1]["tokens_per_second"] > 0
    assert "| RuntimeError |" in (tmp_path / "training_gpu.md").read_text()
