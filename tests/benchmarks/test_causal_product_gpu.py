"""benchmarks.causal_product_gpu: what runs without a GPU (its arguments and its tables)."""

import pytest

from benchmarks import causal_product_gpu


def test_unknown_implementation_is_refused_with_the_allowed_names(capsys):
    with pytest.raises(SystemExit) as stop:
        causal_product_gpu.main(["--impls", "lintf chunked", "flash"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "unknown 'flash'" in error and "allowed: lintf chunked, lintf scan" in error


def test_output_path_that_is_a_file_is_refused_before_any_measurement(tmp_path, capsys):
    taken = tmp_path / "results.md"
    taken.write_text("kept")
    with pytest.raises(SystemExit) as stop:
        causal_product_gpu.main(["--out", str(taken)])
    assert stop.value.code == 2
    assert f"--out: {taken} is a file; give a directory" in capsys.readouterr().err
    assert taken.read_text() == "kept"


def test_table_orders_rows_and_gives_ratios_to_the_base():
    rows = [
        {"dtype": "fp32", "dim": 64, "n": 1024, "lintf chunked": 2.0, "SDPA": 3.0},
        {"dtype": "bf16", "dim": 128, "n": 1024, "lintf chunked": 4.0, "SDPA": "OOM"},
        {"dtype": "bf16", "dim": 64, "n": 4096, "lintf chunked": 0.5, "SDPA": 0.25},
        {"dtype": "bf16", "dim": 64, "n": 1024, "lintf chunked": 1.0, "SDPA": 2.0},
    ]
    lines = causal_product_gpu.table(rows, ["lintf chunked", "SDPA"], "lintf chunked")
    body = [line.split(" | ")[:3] for line in lines[2:]]
    assert body == [["| bf16", "64", "1024"], ["| bf16", "64", "4096"], ["| bf16", "128", "1024"], ["| fp32", "64", "1024"]]
    assert lines[2].endswith("| 1.0 (1.00x) | 2.0 (2.00x) |")
    assert lines[3].endswith("| 0.500 (1.00x) | 0.250 (0.50x) |")
    assert lines[4].endswith("| OOM |")
