"""``LintfForCausalLM``: a lintf token model as a ``transformers`` ``PreTrainedModel`` that generates.

The modules are those of ``AutoregressiveTask`` under the same names (``token_embedding``,
``positions``, ``encoder``, ``head``), built from registry names and loaded from
``model.safetensors``, so the logits are the task's. ``generate`` reads the prompt in one parallel
pass (the task's ``prefill``) and every later token with the recurrent ``step``, as lintf's own
generation does, the states travelling in a ``LintfCache``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from lintf.attention.base import State
from lintf.hf.cache import LintfCache
from lintf.hf.configuration import LintfConfig
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import build_positions
from lintf.models.transformer import TransformerEncoder
from lintf.registry import ATTENTIONS, build_head

DIRECTORY_HEADS = ("categorical",)
"""Heads whose parameters are logits over the vocabulary, which ``generate`` and the pipeline sample from."""


def class_path_entries(node: Any, where: str = "") -> Iterator[str]:
    """The dotted places under ``node`` (dicts and lists) that hold a ``class_path`` key."""
    if isinstance(node, Mapping):
        if "class_path" in node:
            yield where or "(top)"
        for key, value in node.items():
            yield from class_path_entries(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list | tuple):
        for index, value in enumerate(node):
            yield from class_path_entries(value, f"{where}[{index}]")


def check_plain_settings(config: LintfConfig) -> EncoderConfig:
    """The encoder of ``config``; ValueError if its settings name a class to import or a head without logits."""
    settings = config.settings()
    places = list(class_path_entries(settings))
    if places:
        raise ValueError(f"a lintf config.json holds plain data and registry names, but {', '.join(places)} names a "
                         "class_path; refusing to build a model from it")
    if config.head not in DIRECTORY_HEADS:
        raise ValueError(f"LintfForCausalLM needs a head of logits ({', '.join(DIRECTORY_HEADS)}), got {config.head!r}")
    return EncoderConfig.coerce(config.encoder or {})


def require_causal(attention: Any) -> None:
    """ValueError naming the causal attentions unless every attention named in ``attention`` (a registry name,
    or a list of them for a stack of several) has a causal form.

    The check of ``lintf.tasks.autoregressive``, made here without importing the tasks (and Lightning):
    this module may be imported while Lightning's own import is under way.
    """
    names = [attention] if isinstance(attention, str) else [name for name in attention if isinstance(name, str)]
    for name in names:
        if not ATTENTIONS.get(name).supports_causal:
            causal = [known for known in ATTENTIONS.names() if ATTENTIONS.get(known).supports_causal]
            raise ValueError(f"LintfForCausalLM predicts each token from the ones before it, so its attention must be "
                             f"causal; {name!r} is not. Causal attentions: {', '.join(causal)}")


class LintfPreTrainedModel(PreTrainedModel):
    """The ``PreTrainedModel`` base of lintf's models: its config class and how modules start."""

    config_class = LintfConfig
    base_model_prefix = "lintf"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

    @classmethod
    def get_init_context(cls, *args: Any, **kwargs: Any) -> list[Any]:
        """``PreTrainedModel``'s, but building on the CPU rather than the meta device: some attentions
        compute fixed tensors when built (random features, sparsity patterns), which stay unsaved buffers."""
        contexts = super().get_init_context(*args, **kwargs)
        return [context for context in contexts if not (isinstance(context, torch.device) and context.type == "meta")]

    def _move_missing_keys_from_meta_to_device(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to move: the model is built on the CPU (``get_init_context``), with the unsaved buffers its
        modules computed, which ``PreTrainedModel`` would replace with empty tensors for a meta-built model."""

    def _init_weights(self, module: nn.Module) -> None:
        """Keep each module's own initialisation (lintf's); a loaded model's weights come from its file."""


class LintfForCausalLM(LintfPreTrainedModel, GenerationMixin):
    """A lintf token model: token embedding + positions -> causal encoder -> logits over the vocabulary.

    Args:
        config: the model's settings (``LintfConfig``).
    """

    _is_stateful = True  # a recurrent state cannot go back to an earlier position (no assisted decoding)

    def __init__(self, config: LintfConfig) -> None:
        super().__init__(config)
        encoder = check_plain_settings(config)
        require_causal(encoder.attention)
        self.token_embedding = nn.Embedding(config.vocab_size, encoder.d_model)
        self.positions = build_positions(config.positions, config.max_positions, encoder.d_model, config.row_bytes)
        self.encoder = TransformerEncoder(encoder)
        self.head = build_head(config.head, encoder.d_model, n_values=config.vocab_size, **(config.head_kwargs or {}))
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # forward makes its own LintfCache: lintf's states are not keys and values

    def get_input_embeddings(self) -> nn.Embedding:
        return self.token_embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.token_embedding = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.head.logits

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: LintfCache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Logits (B, N, V) of the next token after each of ``input_ids`` (B, N), continuing ``cache``.

        Args:
            input_ids: (B, N) token ids.
            attention_mask: (B, L + N) 1 for a token, 0 for padding, over the cached positions and these.
            position_ids: unused: positions follow the cache (lintf's models count from the first token).
            cache: the states of the positions before ``input_ids`` (``LintfCache``); None starts afresh.
            inputs_embeds: not taken: lintf's models read token ids.
            labels: (B, N) next-token targets (shifted inside, -100 ignored): the loss is returned too.
            use_cache: return the cache holding the states after these tokens (default: the config's).
            logits_to_keep: logits of the last this many positions only; 0 keeps all.
            return_dict: unused: the output is always a ``CausalLMOutputWithPast``.
        """
        if inputs_embeds is not None or input_ids is None:
            raise ValueError("LintfForCausalLM reads token ids: pass input_ids (not inputs_embeds)")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = LintfCache(len(self.encoder.layers))
        states = cache.states() if cache is not None else None
        start = cache.get_seq_length() if cache is not None else 0
        padding = None
        if attention_mask is not None and not bool(attention_mask[:, -input_ids.shape[1]:].all()):
            padding = attention_mask[:, -input_ids.shape[1]:] == 0  # (B, N), True marks padding
        hidden, states = self._encode(input_ids, start, states, padding, use_cache)
        if use_cache:
            cache.store(states, input_ids.shape[1])
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = self.head(hidden)  # (B, N', V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)

    def _encode(self, tokens: Tensor, start: int, states: tuple[State, ...] | None, padding: Tensor | None,
                return_state: bool) -> tuple[Tensor, tuple[State, ...] | None]:
        """Encoder outputs (B, N, d_model) of ``tokens`` at positions ``start``.., and the states after them.

        One new token after a state takes the recurrent ``step`` (lintf's decoding); anything else
        one parallel causal pass (lintf's ``prefill``).
        """
        if states is not None and tokens.shape[1] == 1 and padding is None:
            x_t = self.token_embedding(tokens[:, 0]) + self.positions.at(start)  # (B, d_model)
            out, states = self.encoder.step(x_t, states)
            return out[:, None], states
        x = self.token_embedding(tokens) + self.positions.span(start, tokens.shape[1])  # (B, N, d_model)
        if not return_state:
            return self.encoder(x, causal=True, key_padding_mask=padding, state=states), None
        return self.encoder(x, causal=True, key_padding_mask=padding, state=states, return_state=True)
