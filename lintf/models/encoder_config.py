"""The one description of a transformer encoder stack, shared by every task (``model.encoder`` in YAML).

Adding an encoder option means adding a field here and reading it in ``TransformerEncoder``; the
tasks pass the object through whole, so their signatures, configs and ``--help`` follow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from lintf.models.layer_plan import expand_pattern, options_per_layer, resolve_names
from lintf.names import AttentionName, FeatureMapName
from lintf.registry import ATTENTIONS, LAYERS

ACTIVATION_NAMES = ("gelu", "relu", "silu")
LAYER_KINDS = ("projections", "recipe")
LayerKind = Literal["projections", "recipe"]
FEATURE_MAP_KEYS = ("feature_map", "feature_map_kwargs")


@dataclass(frozen=True)
class EncoderConfig:
    """A transformer encoder whose attention is chosen by registry name.

    Args:
        d_model: model width.
        n_layers: number of layers.
        n_heads: attention heads; must divide d_model.
        attention: attention registry name (``lintf.list_attentions()``) or a registered class path;
            or a list of them for a hybrid stack: one per layer, or a pattern repeated to n_layers
            (``[gated_delta_net, gated_delta_net, gated_delta_net, local]``).
        attention_kwargs: extra arguments of the attention, e.g. ``{n_hashes: 4}`` for reformer; for a
            list of attentions, a list (one entry per layer or per pattern entry) or a mapping by
            attention name (``{local: {window: 64}}``). The feature map is given by ``feature_map`` /
            ``feature_map_kwargs``, not here.
        feature_map: feature-map registry name for attentions that take one (``linear``; in a hybrid
            stack, the layers whose attention takes one); None keeps the attention's default.
        feature_map_kwargs: extra arguments of the feature map, e.g. ``{n_features: 64}``.
        layer: what surrounds each attention: "projections" (q, k, v and output projections around the
            attention's bare formula) or "recipe" (the layer of today's recurrent models, ``lintf.layers``:
            short convolution, q/k norm, learned beta and gates, gated RMSNorm, FLA's defaults per
            attention; ``lintf.list_layers()`` names the attentions that have one; its options are given
            by ``attention_kwargs``); a list, one per layer or a pattern, mixes them.
        d_ff: feed-forward hidden size (>= 1); None uses 4 * d_model.
        activation: feed-forward non-linearity.
        dropout: dropout probability, in [0, 1).
        norm: LayerNorm placement: "pre" (with a final LayerNorm) or "post".
        reversible: couple attention and feed-forward as reversible residuals, ``Y1 = X1 + Attn(X2)``,
            ``Y2 = X2 + FF(Y1)``, on two copies of the input, the output being the final LayerNorm of
            ``(Y1 + Y2) / 2``. Training then recomputes each layer's activations in the backward from
            the last layer's outputs instead of storing them, so its memory does not grow with depth
            (for about one more forward pass of compute). Needs norm "pre".
    """

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    attention: AttentionName | list[AttentionName] = AttentionName("linear")
    attention_kwargs: dict[str, Any] | list[dict[str, Any] | None] | None = None
    feature_map: FeatureMapName | None = None
    feature_map_kwargs: dict[str, Any] | None = None
    layer: LayerKind | list[LayerKind] = "projections"
    d_ff: int | None = None
    activation: Literal["gelu", "relu", "silu"] = "gelu"
    dropout: float = 0.1
    norm: Literal["pre", "post"] = "pre"
    reversible: bool = False

    def __post_init__(self) -> None:
        # Plain strings, so checkpoints holding this config load with torch.load(weights_only=True).
        object.__setattr__(self, "attention", resolve_names(ATTENTIONS, self.attention, "encoder.attention"))
        if self.feature_map is not None:
            object.__setattr__(self, "feature_map", str(self.feature_map))
        if isinstance(self.layer, tuple):
            object.__setattr__(self, "layer", list(self.layer))
        self._check()

    def _check(self) -> None:
        if self.d_model <= 0 or self.n_heads <= 0 or self.d_model % self.n_heads:
            raise ValueError(f"encoder: d_model ({self.d_model}) must be a positive multiple of n_heads ({self.n_heads})")
        if self.n_layers < 1:
            raise ValueError(f"encoder: n_layers must be >= 1, got {self.n_layers}")
        if self.d_ff is not None and self.d_ff < 1:
            raise ValueError(f"encoder: d_ff must be >= 1, or null for 4 * d_model ({4 * self.d_model}); got {self.d_ff}")
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"encoder: unknown activation {self.activation!r}; choose one of {', '.join(ACTIVATION_NAMES)}")
        if self.norm not in ("pre", "post"):
            raise ValueError(f"encoder: norm must be 'pre' or 'post', got {self.norm!r}")
        if self.reversible and self.norm != "pre":
            raise ValueError(f"encoder: reversible=true needs norm 'pre', got norm {self.norm!r}: a post-norm "
                             "residual cannot be inverted (its LayerNorm discards the mean and scale of the sum); "
                             "set norm: pre or reversible: false")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"encoder: dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.attention, list):
            expand_pattern(self.attention, self.n_layers, "encoder.attention")
        self._check_layers()
        layer_kwargs = self.attention_kwargs_per_layer
        misplaced = [key for key in FEATURE_MAP_KEYS if any(key in kwargs for kwargs in layer_kwargs)]
        if misplaced:
            raise ValueError(f"encoder: give {', '.join(misplaced)} as encoder.{misplaced[0]}, not inside "
                             "encoder.attention_kwargs")

    def _check_layers(self) -> None:
        kinds = self.layer if isinstance(self.layer, list) else [self.layer]
        wrong = [kind for kind in kinds if kind not in LAYER_KINDS]
        if wrong:
            raise ValueError(f"encoder: unknown layer {wrong[0]!r}; choose {' or '.join(LAYER_KINDS)}")
        if isinstance(self.layer, list):
            expand_pattern(self.layer, self.n_layers, "encoder.layer")
        without = sorted({name for name, kind in zip(self.attention_per_layer, self.layer_per_layer)
                          if kind == "recipe" and name not in LAYERS})
        if without:
            raise ValueError(f"encoder: layer 'recipe' for attention {', '.join(without)}, which has none; "
                             f"attentions with a layer recipe: {', '.join(LAYERS.names())}")

    @property
    def layer_per_layer(self) -> list[str]:
        """What surrounds each layer's attention ("projections" or "recipe"), a list's pattern repeated."""
        kinds = self.layer if isinstance(self.layer, list) else [self.layer]
        return expand_pattern(kinds, self.n_layers, "encoder.layer")

    @property
    def attention_per_layer(self) -> list[str]:
        """The attention name of each layer, the pattern of a list repeated to ``n_layers``."""
        names = self.attention if isinstance(self.attention, list) else [self.attention]
        return expand_pattern(names, self.n_layers, "encoder.attention")

    @property
    def attention_kwargs_per_layer(self) -> list[dict[str, Any]]:
        """The attention arguments of each layer (``attention_kwargs`` resolved per layer)."""
        return options_per_layer(self.attention_kwargs, self.attention, self.n_layers, "encoder.attention_kwargs")

    @property
    def head_dim(self) -> int:
        """Size of each head's query/key vectors."""
        return self.d_model // self.n_heads

    @property
    def feed_forward_dim(self) -> int:
        """The feed-forward hidden size ``d_ff`` resolves to."""
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, as saved in checkpoints' hyperparameters."""
        return asdict(self)

    @classmethod
    def coerce(cls, value: EncoderConfig | dict[str, Any]) -> EncoderConfig:
        """``value`` as an EncoderConfig: checkpoints store the plain dict of ``to_dict``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = [field.name for field in fields(cls)]
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise ValueError(f"encoder: unknown option(s) {', '.join(unknown)}; it accepts: {', '.join(known)}")
            return cls(**value)
        raise ValueError(f"encoder must be an EncoderConfig or a mapping of its fields, got {type(value).__name__}")
