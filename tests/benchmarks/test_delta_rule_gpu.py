"""benchmarks.delta_rule_gpu: what runs without a GPU (its arguments, its refusal); its tables are decayed_product_gpu's."""

import subprocess
import sys

import pytest
import torch

from benchmarks import delta_rule_gpu
from lintf.ops.delta.reference import delta_rule_reference


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rule", "mamba"], "argument --rule: invalid choice: 'mamba'"),
        (["--impls", "lintf cuda", "flash"], "--impls: unknown 'flash'; allowed: lintf cuda, lintf pytorch, FLA"),
        (["--heads", "16", "24"], "--heads: [24] are not positive multiples of H = 16"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        delta_rule_gpu.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage: python -m benchmarks.delta_rule_gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_cuda_it_exits_non_zero_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.delta_rule_gpu", "--rule", "delta", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "benchmarks.delta_rule_gpu needs a CUDA device (none is visible to torch here)"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("gated", [False, True])
def test_every_implementation_reads_beta_and_the_decay_from_the_gates(gated):
    """Both lintf implementations as the benchmark calls them, on the CPU, against the fp64 recurrence given beta
    (gates[..., 0]) and, for the gated rule, the log-decays (gates[..., 1]) by name."""
    impls, _ = delta_rule_gpu.implementations(gated)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 2, 20, 8, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(1, 2, 20, 8, generator=gen)
    beta, log_decay = torch.rand(1, 2, 20, generator=gen), -torch.rand(1, 2, 20, generator=gen)
    gates = torch.stack([beta, log_decay], dim=-1)
    want, _ = delta_rule_reference(q.double(), k.double(), v.double(), beta.double(),
                                   log_decay.double() if gated else None, scale=1.0)
    for name in ("lintf pytorch", "lintf cuda"):
        torch.testing.assert_close(impls[name](q, k, v, gates).double(), want, rtol=1e-4, atol=1e-5, msg=name)
