"""benchmarks.decayed_product_gpu: what runs without a GPU (its arguments, its tables, its refusal)."""

import subprocess
import sys

import pytest
import torch

from benchmarks import decayed_product_gpu


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--impls", "lintf cuda", "flash"], "--impls: unknown 'flash'; allowed: lintf cuda, lintf pytorch, FLA"),
        (["--heads", "16", "24"], "--heads: [24] are not positive multiples of H = 16"),
        (["--dtypes", "fp64"], "argument --dtypes: invalid choice: 'fp64'"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        decayed_product_gpu.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    taken = tmp_path / "results.md"
    taken.write_text("kept")
    with pytest.raises(SystemExit) as stop:
        decayed_product_gpu.main(["--out", str(taken)])
    assert stop.value.code == 2
    assert f"--out: {taken} is a file" in capsys.readouterr().err
    assert taken.read_text() == "kept"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_cuda_it_exits_non_zero_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.decayed_product_gpu", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == ["benchmarks.decayed_product_gpu needs a CUDA device (none is "
                                                  "visible to torch here)"]
    assert not list(tmp_path.iterdir())


def test_table_orders_rows_and_gives_ratios_and_the_fla_column():
    rows = [
        {"dtype": "fp32", "dim": 64, "heads": 16, "n": 1024, "lintf cuda": 2.0, "FLA": 4.0},
        {"dtype": "bf16", "dim": 64, "heads": 128, "n": 512, "lintf cuda": 1.2, "FLA": "OOM"},
        {"dtype": "bf16", "dim": 64, "heads": 16, "n": 4096, "lintf cuda": 0.5, "FLA": 0.25},
    ]
    lines = decayed_product_gpu.table(rows, ["lintf cuda", "FLA"])
    assert [line.split(" | ")[:4] for line in lines[2:]] == [
        ["| bf16", "64", "16", "4096"], ["| bf16", "64", "128", "512"], ["| fp32", "64", "16", "1024"]]
    assert lines[2].endswith("| 0.500 (1.00x) | 0.250 (0.50x) | 2.00 |")
    assert lines[3].endswith("| 1.2 (1.00x) | OOM | - |")
    assert lines[4].endswith("| 2.0 (1.00x) | 4.0 (2.00x) | 0.50 |")
