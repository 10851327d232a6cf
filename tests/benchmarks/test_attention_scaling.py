"""benchmarks.attention_scaling measures causal attentions only, and says which it skipped."""

from benchmarks.attention_scaling import variants
from lintf.registry import ATTENTIONS, list_attentions


def test_non_causal_attentions_are_skipped_and_named(capsys):
    chosen = {name for name, _ in variants().values()}
    non_causal = sorted(n for n in list_attentions() if not ATTENTIONS.get(n).supports_causal)
    assert non_causal, "the registry has a non-causal-only attention to skip"
    assert chosen == {n for n in list_attentions() if ATTENTIONS.get(n).supports_causal}
    assert f"skipped (non-causal only, supports_causal = False): {', '.join(non_causal)}" in capsys.readouterr().out
