"""benchmarks.training_step_variants: each variant computes the same loss and is timed against the model."""

import json

import pytest

from benchmarks import training_step_variants
from benchmarks.training_step_variants import compare, main, parse

TINY = ["--d-model", "32", "--length", "32", "--tokens", "128", "--rounds", "2", "--warmup", "1"]


def test_variants_are_timed_step_by_step_beside_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    main([*TINY, "--variants", "contiguous_heads", "fused_qkv", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "training_step_variants.json").read_text())["rows"]
    assert [row["variant"] for row in rows] == ["contiguous_heads", "fused_qkv"]
    for row in rows:
        assert all(len(row["seconds"][name]) == 2 for name in ("current", "variant"))
        assert row["ratio"] == pytest.approx(row["median_seconds"]["variant"] / row["median_seconds"]["current"])
        assert row["first_loss"]["variant"] == pytest.approx(row["first_loss"]["current"], rel=1e-5)
    table = (tmp_path / "training_step_variants.md").read_text()
    assert "| fused_qkv |" in table and "d_model 32 (1 layers, 2 heads)" in table


def test_a_variant_that_changes_the_loss_is_refused(monkeypatch):
    monkeypatch.setenv("LINTF_EXTENSION", "off")

    def halve_the_head(model):
        for parameter in model.parameters():
            parameter.data.mul_(0.5)

    monkeypatch.setitem(training_step_variants.VARIANTS, "compile", halve_the_head)
    with pytest.raises(SystemExit, match="compile changes the loss"):
        compare(parse(TINY), "compile")


@pytest.mark.slow
def test_compiled_layers_compute_the_same_loss(tmp_path):
    main([*TINY, "--variants", "compile", "--out", str(tmp_path)])
    row = json.loads((tmp_path / "training_step_variants.json").read_text())["rows"][0]
    assert row["first_loss"]["variant"] == pytest.approx(row["first_loss"]["current"], rel=1e-3)
