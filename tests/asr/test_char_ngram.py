"""Character n-gram LM: proper distributions, Witten-Bell by hand, and exact shallow fusion in beam search."""

import math

import pytest
import torch

from lintf.asr.decoding.char_ngram import END, CharNGram, LanguageModelScorer, read_lm_text
from lintf.asr.decoding.ctc import prefix_beam_search
from tests.asr.ctc_brute_force import label_sequence_probabilities


@pytest.mark.parametrize("order", [1, 2, 4])
def test_every_history_gives_a_distribution(order):
    lm = CharNGram(["the cat sat", "a hat", "that"], order)
    for history in ["", "t", "th", "the c", "zzz", "a hat that"]:
        total = sum(math.exp(lm.score(history, c)) for c in lm.alphabet + END)
        assert total == pytest.approx(1.0, abs=1e-12)


def test_witten_bell_by_hand():
    lm = CharNGram(["ab", "ac"], order=2, alphabet="abc")
    uniform = 1 / 4  # a, b, c, end
    # unigram counts over a, b, a, c, END, END: 6 tokens, 4 types
    unigram = {"a": (2 + 4 * uniform) / 10, "b": (1 + 4 * uniform) / 10, "c": (1 + 4 * uniform) / 10}
    # after "a": b once, c once (2 tokens, 2 types); "a" never
    assert math.exp(lm.score("a", "b")) == pytest.approx((1 + 2 * unigram["b"]) / 4)
    assert math.exp(lm.score("a", "a")) == pytest.approx(2 * unigram["a"] / 4)
    # at the start, "a" followed the start symbol twice: 2 tokens, 1 type
    assert math.exp(lm.score("", "a")) == pytest.approx((2 + unigram["a"]) / 3)


def test_likely_sentences_score_higher_and_bad_input():
    lm = CharNGram(["and it was so", "and god saw the light"] * 3, order=5)
    assert lm.sentence_log_prob("and it was so") > lm.sentence_log_prob("nad ti saw os")
    with pytest.raises(ValueError, match="order must be >= 1"):
        CharNGram(["a"], 0)
    with pytest.raises(ValueError, match="outside the alphabet"):
        CharNGram(["abc"], 2, alphabet="ab")
    with pytest.raises(ValueError, match="not in the language model's alphabet"):
        LanguageModelScorer(lm, "xyz", 1.0, 0.0)


def brute_force_fused(log_probs, scorer):
    """The label sequence maximising log sum_paths P_CTC + scorer terms, over all V**T paths."""
    totals = label_sequence_probabilities(log_probs)

    def fused(labels):
        extra = sum(scorer.extend(labels[:i], v) for i, v in enumerate(labels)) + scorer.finish(labels)
        return math.log(totals[labels]) + extra
    return max(totals, key=fused)


@pytest.mark.parametrize("seed", range(5))
def test_fused_beam_search_is_exact_with_a_wide_beam(seed):
    generator = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(torch.randn(5, 4, generator=generator), dim=-1)  # blank + "abc"
    scorer = LanguageModelScorer(CharNGram(["abc", "cab", "aab"], order=2), "abc", weight=1.5, bonus=0.3)
    best = brute_force_fused(log_probs, scorer)
    assert tuple(prefix_beam_search(log_probs, beam_width=200, prune=-math.inf, scorer=scorer)) == best


def test_language_model_picks_the_known_word_when_sound_is_ambiguous():
    characters = "abt"
    lm = CharNGram(["bat"] * 5 + ["tab"], order=3, alphabet=characters)
    # frames: "b" or "t" equally likely first, then "a", then "t" or "b" equally likely
    probs = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.05, 0.9, 0.025, 0.025], [0.0, 0.0, 0.5, 0.5]]) + 1e-4
    log_probs = (probs / probs.sum(-1, keepdim=True)).log()
    scorer = LanguageModelScorer(lm, characters, weight=1.0, bonus=0.0)
    assert [characters[i - 1] for i in prefix_beam_search(log_probs, 8, scorer=scorer)] == list("bat")


def test_read_lm_text_normalises_lines_and_names_a_bad_one(tmp_path):
    path = tmp_path / "lm.txt"
    path.write_text("And GOD said,\n\n  let there be light \n")
    assert read_lm_text(path, " abcdefghijklmnopqrstuvwxyz'") == ["and god said", "let there be light"]
    with pytest.raises(ValueError, match=r"lm.txt:1: characters \['n', 's'\] are not in the model's vocabulary"):
        read_lm_text(path, " abcdefghijklmopqrtuvwxyz")
    path.write_text("\n ,\n")
    with pytest.raises(ValueError, match="holds no sentence"):
        read_lm_text(path, "ab ")
    with pytest.raises(FileNotFoundError, match="missing.txt does not exist"):
        read_lm_text(tmp_path / "missing.txt", "ab ")
