"""The compiled CPU ops' tuning by the CPU's caches (csrc/common/cpu/tuning.h, lintf.ops.common.tuning).

The choices must follow the documented rule (docs/cpu_op.md, "Tuning by the CPU's caches") for the caches
``LINTF_CPU_CACHE_KB`` pretends, the kernels must stay exact under every choice, and a malformed override must
be refused with a ValueError saying what is allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lintf.ops
from lintf.ops import causal_linear_attention, decayed_dot_product
from lintf.ops.causal import compiled as causal_compiled
from lintf.ops.causal.reference import causal_linear_attention_reference
from lintf.ops.common.tuning import (
    cpu_tuning,
    kept_state_span,
    tuning_lines,
    tuning_values,
)
from lintf.ops.decayed import compiled as decayed_compiled
from lintf.ops.decayed.reference import decayed_dot_product_reference
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.delta.cases import inputs as delta_inputs
from tests.ops.delta.cases import op as delta_op
from tests.ops.delta.cases import outputs_and_grads as delta_outputs_and_grads

KIB = 1024


@pytest.fixture(autouse=True)
def compiled_op() -> None:
    if not causal_compiled.serves("cpu"):
        pytest.skip("the compiled ops are unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


# The rule at C = M = 64, fp32 (1280 B per position of the causal backward's rows, 1028 of the decayed one's;
# chunks of 32 positions): span = largest 32 * 2^k <= 1024 with span * row bytes <= L2 / 2, but at least the
# span whose rows weigh 8 times the 16 KiB kept state (128 positions); prefetch = chunks
# up to 4 whose rows fit L2 / 2 (24 KiB per forward chunk, 40 KiB per causal backward one, 32.1 KiB decayed);
# streamed gradients from 4 x L2; the delta rule's kept copies streamed from L2 / 2.
RULE_AT_64 = {
    # l1,l2,l3 KiB: causal span, fwd / bwd prefetch, decayed span, decayed prefetch
    "32,256,8192": (128, 4, 3, 128, 3),  # an older Intel client core (half of L2 alone: 64)
    "32,512,16384": (128, 4, 4, 128, 4),  # Zen 2 / Zen 3
    "32,1024,32768": (256, 4, 4, 256, 4),  # Zen 4, the machine the constants were first tuned on
    "48,2048,32768": (512, 4, 4, 512, 4),  # an Intel server core (Sapphire Rapids)
}


@pytest.mark.parametrize("caches", list(RULE_AT_64))
def test_choices_follow_the_caches(monkeypatch, caches):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", caches)
    l1, l2, l3 = (int(x) * KIB for x in caches.split(","))
    chosen = tuning_values(64, 64, 4)
    assert (chosen["l1d_bytes"], chosen["l2_bytes"], chosen["l3_bytes"]) == (l1, l2, l3)
    got = tuple(chosen[key] for key in ("causal_span", "causal_forward_prefetch", "causal_backward_prefetch",
                                        "decayed_span", "decayed_prefetch"))
    assert got == RULE_AT_64[caches]
    assert chosen["streamed_gradient_bytes"] == 4 * l2
    assert chosen["streamed_kept_bytes"] == l2 // 2
    assert kept_state_span("causal", 64, 64, 4) == RULE_AT_64[caches][0]


def test_wider_rows_and_smaller_caches_give_shorter_spans(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "32,1024,32768")
    # 2560 B per position: half of L2 allows 128, but 128 rows weigh only 5 times the 64 KiB state
    assert tuning_values(128, 128, 4)["causal_span"] == 256
    assert tuning_values(32, 32, 4)["causal_span"] == 512
    assert tuning_values(64, 64, 8)["causal_span"] == 128  # fp64: rows twice as heavy, the state too
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "32,256,8192")
    assert tuning_values(64, 64, 4)["causal_span"] == 128 and tuning_values(16, 16, 4)["causal_span"] == 256
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "32,1024,32768")
    assert kept_state_span("causal", 64, 64, 2) == kept_state_span("causal", 64, 64, 4) == 256  # bf16 counts as fp32
    assert cpu_tuning(64, 64, torch.bfloat16)["kernels"]["causal_product"]["kept_state_span"]["value"] == 256
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "1,1,0")  # nothing fits: the least of everything
    chosen = tuning_values(8, 8, 4)
    assert (chosen["causal_span"], chosen["causal_forward_prefetch"], chosen["decayed_span"]) == (32, 1, 32)
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "64,1048576,0")  # 1 GiB of L2: capped
    chosen = tuning_values(64, 64, 4)
    assert (chosen["causal_span"], chosen["causal_backward_prefetch"]) == (1024, 4)


def test_the_detected_caches_are_what_linux_reports(monkeypatch):
    monkeypatch.delenv("LINTF_CPU_CACHE_KB", raising=False)
    chosen = tuning_values(64, 64, 4)
    assert chosen["l1d_bytes"] > 0 and chosen["l2_bytes"] >= chosen["l1d_bytes"]
    assert torch.ops.lintf.cpu_cache_source() != "LINTF_CPU_CACHE_KB"
    index = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = {}
    for entry in sorted(index.glob("index*")):
        if (entry / "type").read_text().strip() != "Instruction":
            size = (entry / "size").read_text().strip()
            sizes[int((entry / "level").read_text())] = int(size[:-1]) * {"K": KIB, "M": KIB * KIB}[size[-1]]
    if 2 not in sizes:
        pytest.skip("Linux reports no L2 here to compare with")
    assert (chosen["l1d_bytes"], chosen["l2_bytes"]) == (sizes[1], sizes[2])
    assert chosen["l3_bytes"] == sizes.get(3, 0)


@pytest.mark.parametrize("value, why", [
    ("1024", "does not have three fields"), ("32,1024", "does not have three fields"),
    ("32,1024,0,0", "does not have three fields"), ("32,1024,", "does not have three fields"),
    ("32,,0", "empty field"), ("32,1M,0", "not a whole number"), ("-32,1024,0", "not a whole number"),
    ("0,1024,0", "L1d or L2 of 0"), ("32,0,0", "L1d or L2 of 0"), ("2048,1024,0", "L1d larger than the L2"),
    ("32,1024,99999999999", "over 1 TiB"),
])
def test_bad_overrides_are_refused(monkeypatch, value, why):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", value)
    with pytest.raises(ValueError, match=f"LINTF_CPU_CACHE_KB={value}.*{why}.*three whole numbers of KiB"):
        tuning_values(64, 64, 4)
    q, k, v = (torch.rand(1, 1, 64, 8) for _ in range(3))
    with pytest.raises(ValueError, match="LINTF_CPU_CACHE_KB"):
        causal_linear_attention(q, k, v)  # the kernels read it too


def test_the_report_names_the_cpu_caches_path_and_choices(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", "48,2048,32768")
    report = cpu_tuning(64, 64, torch.float32)
    assert report["caches"]["source"] == "LINTF_CPU_CACHE_KB" and report["caches"]["l2_bytes"] == 2048 * KIB
    assert report["vector_path"] == lintf.ops.cpu_vector_path()
    assert report["kernels"]["causal_product"]["kept_state_span"]["value"] == 512
    text = "\n".join(tuning_lines(report))
    assert "L2 2 MiB" in text and "kept_state_span 512" in text and report["vector_path"] in text


# Pretended caches for the exactness checks: the smallest (every span one chunk, prefetch 1, every gradient and
# kept copy streamed), small, this kind of machine's and a large L2 (spans of up to 1024 positions).
PRETENDED = ["1,1,0", "32,256,8192", "32,1024,32768", "48,2048,32768"]


def scaled_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1)).item() for a, b in zip(got, want))


def with_grads(fn, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    out = fn(*leaves)
    upstream = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
    return [out, *torch.autograd.grad(out, leaves, upstream)]


def leaves(n: int, c: int, m: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.rand(1, 2, n, c, dtype=torch.float64, generator=generator) for _ in range(2))
    v = torch.randn(1, 2, n, m, dtype=torch.float64, generator=generator)
    return [t.requires_grad_() for t in (q, k, v)]


@pytest.mark.parametrize("caches", PRETENDED)
@pytest.mark.parametrize("mode", ["stored", "recompute"])
def test_causal_product_is_exact_under_every_choice(monkeypatch, caches, mode):
    """fp64, 1100 positions of width 8 (rows that the streaming stores take): several spans under every L2."""
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", caches)
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    tensors = leaves(1100, 8, 8)
    want = with_grads(causal_linear_attention_reference, tensors)
    assert scaled_error(with_grads(causal_linear_attention, tensors), want) < 1e-12


@pytest.mark.parametrize("caches", PRETENDED)
@pytest.mark.parametrize("mode", ["stored", "recompute"])
def test_decayed_product_is_exact_under_every_choice(monkeypatch, caches, mode):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", caches)
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    if not decayed_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled decayed product is unavailable")
    q, k, v = leaves(700, 8, 8)
    log_decay = (-0.05 * torch.rand(1, 2, 700, dtype=torch.float64)).requires_grad_()
    tensors = [q, k, v, log_decay]
    want = with_grads(decayed_dot_product_reference, tensors)
    assert scaled_error(with_grads(decayed_dot_product, tensors), want) < 1e-11


@pytest.mark.parametrize("caches", PRETENDED)
def test_delta_rule_is_exact_under_every_choice(monkeypatch, caches):
    """Kept copies streamed (the smallest L2) or stored plainly (a head's 3 chunks fit the larger ones)."""
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", caches)
    tensors = delta_inputs(90, c=8, m=8)
    want = delta_outputs_and_grads(delta_rule_reference, tensors)
    assert scaled_error(delta_outputs_and_grads(delta_op, tensors), want) < 1e-12
