"""``LintfCache``: constant memory per token for recurrent attentions, a growing KV cache for softmax, the
transformers Cache API (sequence length, beam reordering, no cropping)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.cache_utils import Cache  # noqa: E402

from lintf.hf.cache import LintfCache  # noqa: E402
from tests.hf.helpers import export, lintf_greedy, token_task  # noqa: E402


def cache_after(model, tokens: torch.Tensor, steps: int) -> LintfCache:
    """The cache after reading ``tokens`` and then ``steps`` more tokens one at a time."""
    with torch.no_grad():
        out = model(tokens)
        for _ in range(steps):
            out = model(out.logits[:, -1:].argmax(-1), cache=out.cache)
    return out.cache


@pytest.mark.parametrize("attention", ["linear", "gla", "delta_net", "retention"])
def test_recurrent_state_does_not_grow_with_the_tokens(attention, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(export(token_task(attention, max_length=64), None, tmp_path))
    prompt = torch.randint(0, 13, (1, 4))
    short, long = cache_after(model, prompt, 2), cache_after(model, prompt, 40)
    assert isinstance(long, Cache) and long.get_seq_length() == 44
    assert long.state_bytes() == short.state_bytes() > 0


def test_softmax_keeps_every_key_and_value(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(export(token_task("softmax", max_length=64), None, tmp_path))
    prompt = torch.randint(0, 13, (1, 4))
    assert cache_after(model, prompt, 40).state_bytes() > cache_after(model, prompt, 2).state_bytes()


def test_reorder_selects_rows_as_beam_search_asks(tmp_path):
    """Reordering the cache by rows gives the state of those rows: continuing row 1 from the reordered cache
    equals continuing it from its own."""
    model = AutoModelForCausalLM.from_pretrained(export(token_task("linear"), None, tmp_path))
    tokens = torch.randint(0, 13, (2, 5))
    with torch.no_grad():
        cache = model(tokens).cache
        cache.reorder_cache(torch.tensor([1, 1]))
        reordered = model(torch.tensor([[3], [3]]), cache=cache).logits
        alone = model(torch.cat([tokens[1:], torch.tensor([[3]])], dim=1)).logits[:, -1:]
    torch.testing.assert_close(reordered, torch.cat([alone, alone]), rtol=0, atol=1e-5)


def test_beam_search_runs_and_keeps_the_prompt(tmp_path):
    task = token_task("linear")
    model = AutoModelForCausalLM.from_pretrained(export(task, None, tmp_path))
    prompt = torch.randint(0, 13, (1, 5))
    beams = model.generate(prompt, max_new_tokens=4, num_beams=3, do_sample=False)
    assert beams.shape == (1, 9) and beams[0, :5].tolist() == prompt[0].tolist()
    greedy = model.generate(prompt, max_new_tokens=4, num_beams=1, do_sample=False)
    assert greedy.tolist() == lintf_greedy(task, prompt, 4).tolist()


def test_crop_is_refused_saying_why():
    cache = LintfCache(2)
    with pytest.raises(ValueError, match="cannot drop positions"):
        cache.crop(-1)
