"""benchmarks.decayed_product: the path and backward mode hold through the backward; shares and the target line."""

import os

import pytest
import torch

from benchmarks import decayed_product


def test_the_environment_holds_through_the_backward_and_is_restored(monkeypatch):
    seen = []

    def records(q, k, v, log_decay):
        out = v * 1.0
        out.register_hook(lambda grad: seen.append(("backward", os.environ.get("LINTF_CPU_BACKWARD"))))
        seen.append(("forward", os.environ.get("LINTF_CPU_BACKWARD")))
        return out

    monkeypatch.delenv("LINTF_CPU_BACKWARD", raising=False)
    monkeypatch.setattr(decayed_product, "decayed_dot_product", records)
    tensors = decayed_product.inputs(8, True)
    decayed_product.call(tensors, True, {"LINTF_CPU_BACKWARD": "stored"})()
    assert seen == [("forward", "stored"), ("backward", "stored")]
    assert "LINTF_CPU_BACKWARD" not in os.environ


def test_shares_count_the_minimal_flops_and_the_target_line_says_met_or_missed():
    n = decayed_product.TARGET_N
    flops = 4 * n * decayed_product.DIM**2 * decayed_product.HEADS
    row = {"N": n, "impl": "op avx2 stored", "fwd ms": flops / 1e8, "fwd+bwd ms": 3 * flops / 0.4e8, "MB": 1.0}
    decayed_product.with_shares(row, peak=100.0)  # GFLOP/s
    assert row["fwd % peak"] == pytest.approx(100.0) and row["fwd+bwd % peak"] == pytest.approx(40.0)
    assert decayed_product.target_lines([row]) == [
        f"- op avx2 stored: forward+backward 40% of the peak at N={n}, target 50%: missed (0.80 of the target)"
    ]
    row["fwd+bwd ms"] /= 2
    assert "80% of the peak" in decayed_product.target_lines([decayed_product.with_shares(row, 100.0)])[0]
    assert "met (1.60 of the target)" in decayed_product.target_lines([row])[0]
