"""Speech recognition with CTC (paper 4.3): log-mel -> 4x conv subsampling -> bidirectional encoder -> characters."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from torchmetrics.functional.text import char_error_rate, word_error_rate
from torchmetrics.text import CharErrorRate, WordErrorRate

from lintf.attention.base import State
from lintf.speech.char_lm import CharNGram, LanguageModelScorer, read_lm_text
from lintf.speech.context import ConvContext
from lintf.speech.decoding import beam_decode, greedy_decode
from lintf.speech.subsampling import Conv2dSubsampling, subsampled_lengths
from lintf.speech.text import CharVocabulary
from lintf.tasks.base import TransformerTask, sinusoidal_positions
from lintf.tasks.names import AttentionName, FeatureMapName

Batch = dict[str, Any]


class ASRTask(TransformerTask):
    """CTC character recogniser on a non-causal registry-built encoder; CER/WER; ``predict`` transcribes.

    The token embedding of ``TransformerTask`` is replaced by a convolutional front end, the
    output head is the CTC head (label 0 = blank) and positions are sinusoidal, so utterances
    longer than ``max_length`` still run. Batches come from ``lintf.data.speech.SpeechData``.

    Args:
        vocab_size: characters + blank; linked from the data module.
        max_length: encoder positions of the longest training utterance; linked from the data module.
        d_model: model width.
        n_layers: transformer layers.
        n_heads: attention heads; must divide d_model.
        attention: attention registry name (``lintf.list_attentions()``) or a registered class path.
        attention_kwargs: extra arguments of that attention, e.g. ``{n_hashes: 4}`` for reformer.
        feature_map: feature-map registry name for attentions that take one; None keeps the default.
        feature_map_kwargs: extra arguments of the feature map.
        d_ff: feed-forward hidden size; None uses 4 * d_model.
        activation: feed-forward non-linearity.
        dropout: dropout probability.
        norm: LayerNorm placement.
        n_mels: log-mel bins of the input features (the data module's ``n_mels``).
        conv_channels: channels of the subsampling convolutions.
        context_blocks: residual depthwise-convolution blocks between the front end and the encoder
            (``lintf.speech.context``): local context that linear attention lacks; 0 for none.
        context_kernel: frames (after subsampling) seen by each context block's convolution; odd.
        decoder: "greedy" best path or "beam" prefix beam search for test and predict
            (validation is always greedy, for speed).
        beam_width: prefixes kept by the beam search.
        lm_order: order of a character n-gram language model fused into the beam search
            (``lintf.speech.char_lm``), built from ``lm_text``; 0 for none.
        lm_text: text file of the language model, one sentence per line (e.g. the ``lm.txt`` that
            ``lintf data synth-speech`` writes: the book without the evaluation sentences); None
            uses the training manifest's transcripts.
        lm_weight: weight of the language model's log-probabilities in the beam search.
        lm_bonus: score added per emitted character (balances the model's bias towards short output).
        optimizer: optimizer class and arguments.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
    """

    prediction_metrics = ("cer", "wer")
    # Decoding options: ``lintf test/predict --ckpt_path`` takes them from the command line, not the checkpoint.
    inference_options = ("decoder", "beam_width", "lm_order", "lm_text", "lm_weight", "lm_bonus")

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        d_model: int = 256,
        n_layers: int = 6,
        n_heads: int = 4,
        attention: AttentionName = AttentionName("linear"),
        attention_kwargs: dict[str, Any] | None = None,
        feature_map: FeatureMapName | None = None,
        feature_map_kwargs: dict[str, Any] | None = None,
        d_ff: int | None = None,
        activation: Literal["gelu", "relu", "silu"] = "gelu",
        dropout: float = 0.1,
        norm: Literal["pre", "post"] = "pre",
        n_mels: int = 80,
        conv_channels: int = 64,
        context_blocks: int = 0,
        context_kernel: int = 9,
        decoder: Literal["greedy", "beam"] = "greedy",
        beam_width: int = 8,
        lm_order: int = 0,
        lm_text: str | None = None,
        lm_weight: float = 0.5,
        lm_bonus: float = 1.0,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must count the blank and at least one character, got {vocab_size}")
        if beam_width < 1:
            raise ValueError(f"beam_width must be >= 1, got {beam_width}")
        if lm_order < 0 or lm_weight < 0:
            raise ValueError(f"lm_order and lm_weight must be >= 0 (lm_order 0: no language model), "
                             f"got {lm_order} and {lm_weight}")
        super().__init__(
            vocab_size, max_length, d_model, n_layers, n_heads, attention, attention_kwargs, feature_map,
            feature_map_kwargs, d_ff, activation, dropout, norm, "sinusoidal", optimizer, lr_scheduler,
        )
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        del self.token_embedding  # speech enters through the convolutional front end instead
        self.frontend = Conv2dSubsampling(n_mels, d_model, conv_channels)
        self.context = ConvContext(d_model, context_blocks, context_kernel, dropout)
        self.vocabulary: CharVocabulary | None = None
        self.scorer: LanguageModelScorer | None = None

    def build_metrics(self) -> None:
        self.val_cer, self.val_wer = CharErrorRate(), WordErrorRate()
        self.dev_cer, self.dev_wer = CharErrorRate(), WordErrorRate()
        self.test_cer, self.test_wer = CharErrorRate(), WordErrorRate()

    def setup(self, stage: str) -> None:
        datamodule = self.trainer.datamodule if self._trainer else None
        vocabulary = getattr(datamodule, "vocabulary", None)
        if vocabulary is not None:
            if len(vocabulary) != self.hparams.vocab_size:
                raise ValueError(f"the data's vocabulary has {len(vocabulary)} labels, the model {self.hparams.vocab_size}")
            self.vocabulary = vocabulary
        # Only test and predict decode by beam search (validation is greedy): fit need not wait for the LM.
        if self.hparams.lm_order and self.hparams.decoder == "beam" and stage in ("test", "predict"):
            self.scorer = self.language_model(datamodule)

    def language_model(self, datamodule: Any) -> LanguageModelScorer:
        """The character n-gram of ``lm_text`` or the training transcripts, weighted for the beam search."""
        transcripts = getattr(datamodule, "transcripts", None)
        has_training_text = transcripts is not None and datamodule.manifests.get("train") is not None
        if self.vocabulary is None or (self.hparams.lm_text is None and not has_training_text):
            raise ValueError("lm_order > 0 builds the language model from lm_text or the training manifest: give "
                             "--model.init_args.lm_text or --data.init_args.train_manifest, or set "
                             "--model.init_args.lm_order 0")
        characters = self.vocabulary.characters
        text = read_lm_text(self.hparams.lm_text, characters) if self.hparams.lm_text else transcripts("train")
        lm = CharNGram(text, self.hparams.lm_order, characters)
        return LanguageModelScorer(lm, characters, self.hparams.lm_weight, self.hparams.lm_bonus)

    def forward(self, features: Tensor, feature_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Per-frame label log-probabilities.

        Args:
            features: (B, T, n_mels) normalised log-mel frames, zero-padded.
            feature_lengths: (B,) valid frames.

        Returns:
            log-probabilities (B, T', vocab_size) and valid lengths (B,), T' = subsampled_lengths(T).
        """
        x = self.frontend(features) * math.sqrt(self.hparams.d_model)  # (B, T', d_model)
        lengths = subsampled_lengths(feature_lengths).clamp(min=1)
        frames = x.shape[1]
        padding = torch.arange(frames, device=x.device)[None, :] >= lengths[:, None]  # (B, T') True = padding
        x = self.context(x, padding)
        positions = self.position_embedding
        if frames > positions.shape[0]:
            positions = sinusoidal_positions(frames, self.hparams.d_model).to(x)
        hidden = self.encoder(x + positions[:frames], causal=False, key_padding_mask=padding)
        return F.log_softmax(self.head(hidden).float(), dim=-1), lengths

    def ctc_loss(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """Mean CTC loss per target character, the log-probabilities and their lengths."""
        log_probs, lengths = self(batch["features"], batch["feature_lengths"])
        loss = F.ctc_loss(log_probs.transpose(0, 1), batch["targets"], lengths, batch["target_lengths"],
                          blank=CharVocabulary.BLANK, reduction="mean", zero_infinity=True)
        return loss, log_probs, lengths

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss, _, _ = self.ctc_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["text"]))
        return loss

    def transcribe(self, log_probs: Tensor, lengths: Tensor, decoder: Literal["greedy", "beam"]) -> list[str]:
        """Text of each utterance by greedy or beam decoding."""
        if self.vocabulary is None:
            raise ValueError("ASRTask has no vocabulary: run it with SpeechData or load a checkpoint")
        if decoder == "beam":
            labels = beam_decode(log_probs, lengths, self.hparams.beam_width, CharVocabulary.BLANK, self.scorer)
        else:
            labels = greedy_decode(log_probs, lengths, CharVocabulary.BLANK)
        return [self.vocabulary.decode(ids) for ids in labels]

    def _evaluate(self, batch: Batch, stage: str, decoder: Literal["greedy", "beam"]) -> None:
        loss, log_probs, lengths = self.ctc_loss(batch)
        hypotheses = self.transcribe(log_probs, lengths, decoder)
        cer, wer = getattr(self, f"{stage}_cer"), getattr(self, f"{stage}_wer")
        cer(hypotheses, batch["text"])
        wer(hypotheses, batch["text"])
        size = len(batch["text"])
        # Each stage has its own names, so a second validation loader ("dev") needs no "/dataloader_idx_1".
        self.log(f"{stage}/loss", loss, prog_bar=True, sync_dist=True, batch_size=size, add_dataloader_idx=False)
        self.log(f"{stage}/cer", cer, prog_bar=True, batch_size=size, add_dataloader_idx=False)
        self.log(f"{stage}/wer", wer, batch_size=size, add_dataloader_idx=False)

    def validation_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Greedy CER/WER of the validation manifest (``val/*``) or, as loader 1, the dev manifest (``dev/*``)."""
        self._evaluate(batch, "val" if dataloader_idx == 0 else "dev", "greedy")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.hparams.decoder)

    def predict_step(self, batch: Batch, batch_idx: int) -> list[dict[str, Any]]:
        """One row per utterance: file, reference, hypothesis, its CER and WER."""
        log_probs, lengths = self(batch["features"], batch["feature_lengths"])
        hypotheses = self.transcribe(log_probs, lengths, self.hparams.decoder)
        return [
            {"audio_filepath": path, "reference": reference, "prediction": hypothesis,
             "cer": float(char_error_rate(hypothesis, reference)), "wer": float(word_error_rate(hypothesis, reference))}
            for path, reference, hypothesis in zip(batch["audio_filepath"], batch["text"], hypotheses)
        ]

    def sample_table(self, batch: Batch, n: int) -> tuple[list[str], list[list[Any]]]:
        """A few greedy transcripts of ``batch`` as (columns, rows) for a logger's table."""
        log_probs, lengths = self(batch["features"][:n], batch["feature_lengths"][:n])
        hypotheses = self.transcribe(log_probs, lengths, "greedy")
        return ["reference", "prediction"], [[r, h] for r, h in zip(batch["text"][:n], hypotheses)]

    def init_state(self, batch_size: int) -> list[State]:
        raise ValueError("ASRTask's encoder is bidirectional: it has no recurrent (RNN) form")

    def step(self, token: Tensor, position: int, state: list[State]) -> tuple[Tensor, list[State]]:
        raise ValueError("ASRTask's encoder is bidirectional: it has no recurrent (RNN) form")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.vocabulary is not None:
            checkpoint["lintf_vocabulary"] = self.vocabulary.characters

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("lintf_vocabulary")
        if saved is None:
            return
        if self.vocabulary is not None and self.vocabulary.characters != saved:
            raise ValueError(f"the checkpoint was trained on characters {saved!r}, but the data's vocabulary is "
                             f"{self.vocabulary.characters!r}; pass --data.init_args.vocabulary {saved!r}")
        self.vocabulary = CharVocabulary(saved)
