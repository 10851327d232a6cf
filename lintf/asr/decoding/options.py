"""The CTC decoding options of ``ASRTask``: greedy or prefix beam search, with an optional character LM."""

from __future__ import annotations

from typing import Literal

from lintf.tasks.decoding import Decoding


class CTCDecoding(Decoding):
    """How test and predict turn per-frame label scores into text (validation is always greedy).

    In YAML, beside ``model:``::

        decoding:
          class_path: lintf.asr.CTCDecoding
          init_args: {decoder: beam, beam_width: 32, lm_order: 8, lm_text: data/speech/synth/lm.txt}

    Args:
        decoder: "greedy" best path or "beam" prefix beam search.
        beam_width: prefixes kept by the beam search.
        lm_order: order of a character n-gram language model fused into the beam search
            (``lintf.asr.decoding.char_ngram``), built from ``lm_text``; 0 for none.
        lm_text: text file of the language model, one sentence per line (e.g. the ``lm.txt`` that
            ``lintf data synth-speech`` writes: the book without the evaluation sentences); None
            uses the training manifest's transcripts.
        lm_weight: weight of the language model's log-probabilities in the beam search.
        lm_bonus: score added per emitted character (balances the model's bias towards short output).
    """

    def __init__(
        self,
        decoder: Literal["greedy", "beam"] = "greedy",
        beam_width: int = 8,
        lm_order: int = 0,
        lm_text: str | None = None,
        lm_weight: float = 0.5,
        lm_bonus: float = 1.0,
    ) -> None:
        if decoder not in ("greedy", "beam"):
            raise ValueError(f"decoding: decoder must be 'greedy' or 'beam', got {decoder!r}")
        if beam_width < 1:
            raise ValueError(f"decoding: beam_width must be >= 1, got {beam_width}")
        if lm_order < 0 or lm_weight < 0:
            raise ValueError(f"decoding: lm_order and lm_weight must be >= 0 (lm_order 0: no language model), "
                             f"got {lm_order} and {lm_weight}")
        self.decoder, self.beam_width = decoder, beam_width
        self.lm_order, self.lm_text, self.lm_weight, self.lm_bonus = lm_order, lm_text, lm_weight, lm_bonus

    @property
    def uses_language_model(self) -> bool:
        """Whether decoding fuses a character n-gram (beam search with lm_order > 0)."""
        return self.decoder == "beam" and self.lm_order > 0
