"""``LintfForCausalLM`` loaded from an exported directory: the task's logits for every causal attention, and
``generate``'s greedy tokens equal to lintf's own generation, with the attention state as its cache."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.conftest import causal_attention_names  # noqa: E402
from tests.hf.helpers import export, lintf_greedy, token_task  # noqa: E402


def seeded(function, *args, **kwargs):
    """``function(*args, **kwargs)`` after seeding torch's generator: reformer draws its hash rotations anew
    in every forward, so two runs agree only on the same draws."""
    torch.manual_seed(7)
    return function(*args, **kwargs)


@pytest.mark.parametrize("attention", causal_attention_names())
def test_logits_and_greedy_tokens_equal_lintf_for_every_causal_attention(attention, tmp_path):
    task = token_task(attention)
    model = AutoModelForCausalLM.from_pretrained(export(task, None, tmp_path))
    prompt = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = seeded(task, prompt)
        for use_cache in (False, True):  # a plain parallel pass, and the one that returns the states
            logits = seeded(model, prompt, use_cache=use_cache).logits
            torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
    generated = seeded(model.generate, prompt, max_new_tokens=9, do_sample=False)
    assert generated.tolist() == seeded(lintf_greedy, task, prompt, 9).tolist()


def test_continuing_the_cache_equals_one_pass(tmp_path):
    """Logits of a sequence read in pieces through the cache (a prompt, then one token, then three) are
    those of one parallel pass: the cache carries the state and the position."""
    task = token_task("gla")
    model = AutoModelForCausalLM.from_pretrained(export(task, None, tmp_path))
    tokens = torch.randint(0, 13, (2, 12))
    with torch.no_grad():
        whole = task(tokens)
        first = model(tokens[:, :8])
        second = model(tokens[:, 8:9], cache=first.cache)
        third = model(tokens[:, 9:], cache=second.cache)
    pieces = torch.cat([first.logits, second.logits, third.logits], dim=1)
    torch.testing.assert_close(pieces, whole, rtol=0, atol=1e-5)
    assert third.cache.get_seq_length() == 12


def test_left_padding_leaves_the_row_as_without_it(tmp_path):
    """A row left-padded in a batch continues as it does alone: padded keys add nothing to the state."""
    torch.manual_seed(0)
    from lintf.tasks import AutoregressiveTask
    from tests.hf.helpers import tiny_encoder

    task = AutoregressiveTask(13, 24, tiny_encoder("linear"), positions="none").eval()
    model = AutoModelForCausalLM.from_pretrained(export(task, None, tmp_path))
    short = torch.tensor([[5, 6, 7]])
    batch = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    padded = model.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    alone = model.generate(short, max_new_tokens=6, do_sample=False)
    assert padded[0, 2:].tolist() == alone[0].tolist()


def test_labels_give_the_next_token_loss(tmp_path):
    task = token_task("linear")
    model = AutoModelForCausalLM.from_pretrained(export(task, None, tmp_path))
    tokens = torch.randint(0, 13, (2, 9))
    with torch.no_grad():
        loss = model(tokens, labels=tokens).loss
        reference = torch.nn.functional.cross_entropy(task(tokens)[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    torch.testing.assert_close(loss, reference)


def test_token_embeddings_are_refused(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(export(token_task("linear"), None, tmp_path))
    with pytest.raises(ValueError, match="reads token ids"):
        model(inputs_embeds=torch.zeros(1, 3, 16))


def test_a_non_causal_attention_is_refused_naming_the_causal_ones():
    from lintf.hf.configuration import LintfConfig
    from lintf.hf.modeling import LintfForCausalLM

    config = LintfConfig(vocab_size=5, encoder={"d_model": 8, "n_layers": 1, "n_heads": 2, "attention": "linformer"})
    with pytest.raises(ValueError, match="'linformer' is not. Causal attentions: .*linear"):
        LintfForCausalLM(config)
