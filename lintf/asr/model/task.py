"""Speech recognition with CTC (paper 4.3): log-mel -> 4x conv subsampling -> bidirectional encoder -> characters."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from torchmetrics.functional.text import char_error_rate, word_error_rate
from torchmetrics.text import CharErrorRate, WordErrorRate

from lintf.asr.decoding.char_ngram import CharNGram, LanguageModelScorer, read_lm_text
from lintf.asr.decoding.ctc import beam_decode, greedy_decode
from lintf.asr.decoding.options import CTCDecoding
from lintf.asr.model.conv_blocks import DepthwiseConvBlocks
from lintf.asr.model.frontend import Conv2dSubsampling, subsampled_lengths
from lintf.asr.text import CharVocabulary
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import SinusoidalPositions
from lintf.registry import build_head
from lintf.tasks.base import TransformerTask
from lintf.tasks.decoding import Decoding

Batch = dict[str, Any]


class ASRTask(TransformerTask):
    """CTC character recogniser: convolutional front end, a non-causal registry-built encoder, a CTC head.

    Label 0 is the CTC blank. Positions are sinusoidal, so utterances longer than ``max_length``
    still run. Batches come from ``lintf.asr.SpeechData``. Test and predict decode with the
    ``CTCDecoding`` given through ``--decoding`` (greedy by default); validation is greedy.

    Args:
        vocab_size: characters + blank; linked from the data module.
        max_length: encoder positions of the longest training utterance; linked from the data module.
        encoder: the encoder stack (width, depth, attention and feature map by registry name, ...).
        n_mels: log-mel bins of the input features (the data module's ``n_mels``).
        conv_channels: channels of the subsampling convolutions.
        depthwise_blocks: residual depthwise-convolution blocks between the front end and the encoder
            (``lintf.asr.model.conv_blocks``): the local context that linear attention lacks; 0 for none.
        depthwise_kernel: frames (after subsampling) seen by each block's convolution; odd.
        optimizer: optimizer class and arguments.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
    """

    prediction_metrics = ("cer", "wer")
    decoding_class = CTCDecoding

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        encoder: EncoderConfig = EncoderConfig(d_model=256, n_layers=6, n_heads=4),
        n_mels: int = 80,
        conv_channels: int = 64,
        depthwise_blocks: int = 0,
        depthwise_kernel: int = 9,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
    ) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must count the blank and at least one character, got {vocab_size}")
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        super().__init__(encoder, optimizer, lr_scheduler)
        d_model, dropout = self.d_model, self.encoder_config.dropout
        self.frontend = Conv2dSubsampling(n_mels, d_model, conv_channels)
        self.conv_blocks = DepthwiseConvBlocks(d_model, depthwise_blocks, depthwise_kernel, dropout)
        self.positions = SinusoidalPositions(max_length, d_model)
        self.head = build_head("categorical", d_model, n_values=vocab_size)
        self.decoding = CTCDecoding()
        self.vocabulary: CharVocabulary | None = None
        self.scorer: LanguageModelScorer | None = None
        self.build_metrics()

    def build_metrics(self) -> None:
        self.val_cer, self.val_wer = CharErrorRate(), WordErrorRate()
        self.dev_cer, self.dev_wer = CharErrorRate(), WordErrorRate()
        self.test_cer, self.test_wer = CharErrorRate(), WordErrorRate()

    def use_decoding(self, decoding: Decoding) -> None:
        """Decode test and predict batches with ``decoding`` (a ``CTCDecoding``)."""
        if not isinstance(decoding, CTCDecoding):
            raise ValueError(f"ASRTask decodes with lintf.asr.CTCDecoding, got {type(decoding).__name__}")
        self.decoding, self.scorer = decoding, None

    def setup(self, stage: str) -> None:
        datamodule = self.attached_datamodule
        self.check_features(datamodule)
        vocabulary = getattr(datamodule, "vocabulary", None)
        if vocabulary is not None:
            if len(vocabulary) != self.hparams.vocab_size:
                raise ValueError(f"the data's vocabulary has {len(vocabulary)} labels, the model {self.hparams.vocab_size}")
            self.vocabulary = vocabulary
        # Only test and predict decode by beam search (validation is greedy): fit need not wait for the LM.
        if self.decoding.uses_language_model and stage in ("test", "predict"):
            self.scorer = self.language_model(datamodule)

    def check_features(self, datamodule: Any) -> None:
        """ValueError naming both values unless ``datamodule``'s log-mel bins are those the front end reads.

        Args:
            datamodule: the run's data module (``SpeechData``); one without ``n_mels`` is not checked.
        """
        hparams = getattr(datamodule, "hparams", None) or {}
        n_mels = hparams.get("n_mels")
        if n_mels is not None and n_mels != self.hparams.n_mels:
            raise ValueError(
                f"the data's features have n_mels={n_mels} log-mel bins, but the model reads n_mels="
                f"{self.hparams.n_mels} (its front end is built for that many, and a checkpoint's model keeps the "
                f"n_mels it was trained with). Give both the same: --data.init_args.n_mels {self.hparams.n_mels} "
                f"to read this model's features, or --model.init_args.n_mels {n_mels} for a new model."
            )

    def language_model(self, datamodule: Any) -> LanguageModelScorer:
        """The character n-gram of ``lm_text`` or the training transcripts, weighted for the beam search."""
        decoding = self.decoding
        transcripts = getattr(datamodule, "transcripts", None)
        has_training_text = transcripts is not None and datamodule.manifests.get("train") is not None
        if self.vocabulary is None or (decoding.lm_text is None and not has_training_text):
            raise ValueError("lm_order > 0 builds the language model from lm_text or the training manifest: give "
                             "--decoding.lm_text or --data.init_args.train_manifest, or set --decoding.lm_order 0")
        characters = self.vocabulary.characters
        text = read_lm_text(decoding.lm_text, characters) if decoding.lm_text else transcripts("train")
        lm = CharNGram(text, decoding.lm_order, characters)
        return LanguageModelScorer(lm, characters, decoding.lm_weight, decoding.lm_bonus)

    def forward(self, features: Tensor, feature_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Per-frame label log-probabilities.

        Args:
            features: (B, T, n_mels) normalised log-mel frames, zero-padded.
            feature_lengths: (B,) valid frames.

        Returns:
            log-probabilities (B, T', vocab_size) and valid lengths (B,), T' = subsampled_lengths(T).
        """
        x = self.frontend(features) * math.sqrt(self.d_model)  # (B, T', d_model)
        lengths = subsampled_lengths(feature_lengths).clamp(min=1)
        frames = x.shape[1]
        padding = torch.arange(frames, device=x.device)[None, :] >= lengths[:, None]  # (B, T') True = padding
        x = self.conv_blocks(x, padding)
        hidden = self.encoder(x + self.positions.extended(frames).to(x), causal=False, key_padding_mask=padding)
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

    def transcribe(self, log_probs: Tensor, lengths: Tensor, decoding: CTCDecoding | None = None) -> list[str]:
        """Text of each utterance, decoded with ``decoding`` (the task's own when None)."""
        if self.vocabulary is None:
            raise ValueError("ASRTask has no vocabulary: run it with SpeechData or load a checkpoint")
        decoding = decoding or self.decoding
        if decoding.decoder == "beam":
            scorer = self.scorer if decoding is self.decoding else None
            labels = beam_decode(log_probs, lengths, decoding.beam_width, CharVocabulary.BLANK, scorer)
        else:
            labels = greedy_decode(log_probs, lengths, CharVocabulary.BLANK)
        return [self.vocabulary.decode(ids) for ids in labels]

    def _evaluate(self, batch: Batch, stage: str, decoding: CTCDecoding) -> None:
        loss, log_probs, lengths = self.ctc_loss(batch)
        hypotheses = self.transcribe(log_probs, lengths, decoding)
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
        self._evaluate(batch, "val" if dataloader_idx == 0 else "dev", GREEDY)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.decoding)

    def predict_step(self, batch: Batch, batch_idx: int) -> list[dict[str, Any]]:
        """One row per utterance: file, reference, hypothesis, its CER and WER."""
        log_probs, lengths = self(batch["features"], batch["feature_lengths"])
        hypotheses = self.transcribe(log_probs, lengths)
        return [
            {"audio_filepath": path, "reference": reference, "prediction": hypothesis,
             "cer": float(char_error_rate(hypothesis, reference)), "wer": float(word_error_rate(hypothesis, reference))}
            for path, reference, hypothesis in zip(batch["audio_filepath"], batch["text"], hypotheses)
        ]

    def sample_table(self, batch: Batch, n: int) -> tuple[list[str], list[list[Any]]]:
        """A few greedy transcripts of ``batch`` as (columns, rows) for a logger's table."""
        log_probs, lengths = self(batch["features"][:n], batch["feature_lengths"][:n])
        hypotheses = self.transcribe(log_probs, lengths, GREEDY)
        return ["reference", "prediction"], [[r, h] for r, h in zip(batch["text"][:n], hypotheses)]

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


GREEDY = CTCDecoding("greedy")
