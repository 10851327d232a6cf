"""Character n-gram language model (interpolated Witten-Bell) for shallow fusion in CTC beam search.

P(c | h) = (C(h c) + T(h) P(c | h')) / (C(h) + T(h)), where h is the last ``order - 1``
characters, h' drops its first character, C counts training occurrences and T(h) is the number
of distinct characters seen after h; below the empty history the distribution is uniform over
the alphabet and the end of the sentence. Sentences start with ``order - 1`` start symbols.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from lintf.asr.text import normalize_text

START, END = "\x02", "\x03"  # never in normalised transcripts


class CharNGram:
    """A character n-gram model trained on ``texts``.

    Args:
        texts: training sentences (normalised transcripts).
        order: n of the n-grams (>= 1); ``order`` - 1 characters of history.
        alphabet: the characters the model predicts (besides the end of the sentence); None uses
            those of ``texts``.
    """

    def __init__(self, texts: Iterable[str], order: int, alphabet: str | None = None) -> None:
        if order < 1:
            raise ValueError(f"n-gram order must be >= 1, got {order}")
        texts = list(texts)
        self.order = order
        self.alphabet = alphabet if alphabet is not None else "".join(sorted(set("".join(texts))))
        unknown = set("".join(texts)) - set(self.alphabet)
        if unknown:
            raise ValueError(f"training texts use characters {sorted(unknown)} outside the alphabet {self.alphabet!r}")
        self.followers: dict[str, Counter[str]] = defaultdict(Counter)  # history -> next-character counts
        for text in texts:
            padded = START * (order - 1) + text + END
            for i in range(order - 1, len(padded)):
                for k in range(order):  # histories of length 0 .. order - 1
                    self.followers[padded[i - k : i]][padded[i]] += 1
        self.totals = {history: sum(counts.values()) for history, counts in self.followers.items()}
        self.log_prob = lru_cache(maxsize=200_000)(self._log_prob)

    def context(self, text: str) -> str:
        """The history that predicts the character after ``text`` (start symbols for short texts)."""
        if self.order == 1:
            return ""
        return (START * (self.order - 1) + text)[-(self.order - 1) :]

    def _probability(self, history: str, char: str) -> float:
        lower = self._probability(history[1:], char) if history else 1.0 / (len(self.alphabet) + 1)
        counts = self.followers.get(history)
        if not counts:
            return lower
        total, types = self.totals[history], len(counts)
        return (counts[char] + types * lower) / (total + types)

    def _log_prob(self, history: str, char: str) -> float:
        return math.log(self._probability(history, char))

    def score(self, text: str, char: str) -> float:
        """log P(char | the characters of ``text`` so far); ``char`` may be ``END``."""
        if char != END and char not in self.alphabet:
            raise ValueError(f"character {char!r} is not in the language model's alphabet {self.alphabet!r}")
        return self.log_prob(self.context(text), char)

    def sentence_log_prob(self, text: str) -> float:
        """log P(text followed by the end of the sentence)."""
        return sum(self.score(text[:i], c) for i, c in enumerate(text)) + self.score(text, END)


def read_lm_text(path: str | Path, alphabet: str) -> list[str]:
    """The sentences of a language-model text file (one per line, normalised like transcripts).

    ValueError naming the file and line of a sentence with characters outside ``alphabet`` (the
    model's vocabulary), or if the file holds no sentence.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"language-model text {path} does not exist (`lintf data synth-speech` writes lm.txt "
                                "beside the manifests; or set lm_text to null to use the training transcripts)")
    keep_accents = not alphabet.isascii()
    allowed, sentences = set(alphabet), []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = normalize_text(line, keep_accents)
        unknown = set(text) - allowed
        if unknown:
            raise ValueError(f"{path}:{number}: characters {sorted(unknown)} are not in the model's vocabulary {alphabet!r}")
        if text:
            sentences.append(text)
    if not sentences:
        raise ValueError(f"language-model text {path} holds no sentence")
    return sentences


class LanguageModelScorer:
    """Shallow fusion of a ``CharNGram`` into CTC beam search: ``weight`` * log P_LM + ``bonus`` per label.

    The bonus per emitted character offsets the language model's preference for short outputs.

    Args:
        lm: the character model.
        characters: the CTC vocabulary's characters; label i (i >= 1) is ``characters[i - 1]``.
        weight: language-model weight.
        bonus: added per emitted character.
    """

    def __init__(self, lm: CharNGram, characters: str, weight: float, bonus: float) -> None:
        unknown = set(characters) - set(lm.alphabet)
        if unknown:
            raise ValueError(f"characters {sorted(unknown)} of the CTC vocabulary are not in the language model's "
                             f"alphabet {lm.alphabet!r}")
        self.lm, self.characters, self.weight, self.bonus = lm, characters, weight, bonus

    def _text(self, prefix: tuple[int, ...]) -> str:
        """The last order - 1 characters of ``prefix``: all the history the model reads."""
        history = prefix[-(self.lm.order - 1) :] if self.lm.order > 1 else ()
        return "".join(self.characters[label - 1] for label in history)

    def extend(self, prefix: tuple[int, ...], label: int) -> float:
        return self.weight * self.lm.score(self._text(prefix), self.characters[label - 1]) + self.bonus

    def finish(self, prefix: tuple[int, ...]) -> float:
        return self.weight * self.lm.score(self._text(prefix), END)
