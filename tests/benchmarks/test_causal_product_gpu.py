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
        {"dtype": "bf16", "dim": 64, "heads": 128, "n": 512, "lintf chunked": 3.0, "SDPA": 1.5},
        {"dtype": "bf16", "dim": 64, "n": 1024, "lintf chunked": 1.0, "SDPA": 2.0},
    ]
    lines = causal_product_gpu.table(rows, ["lintf chunked", "SDPA"], "lintf chunked")
    body = [line.split(" | ")[:4] for line in lines[2:]]
    assert body == [["| bf16", "64", "16", "1024"], ["| bf16", "64", "16", "4096"], ["| bf16", "64", "128", "512"],
                    ["| bf16", "128", "16", "1024"], ["| fp32", "64", "16", "1024"]]
    assert lines[2].endswith("| 1.0 (1.00x) | 2.0 (2.00x) |")
    assert lines[3].endswith("| 0.500 (1.00x) | 0.250 (0.50x) |")
    assert lines[4].endswith("| 3.0 (1.00x) | 1.5 (0.50x) |")
    assert lines[5].endswith("| OOM |")


def test_heads_must_be_multiples_of_the_head_count(capsys):
    with pytest.raises(SystemExit):
        causal_product_gpu.main(["--heads", "16", "24"])
    assert "--heads: [24] are not positive multiples of H = 16" in capsys.readouterr().err
