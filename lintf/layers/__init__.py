"""Layer recipes: the projections, short convolutions, gates and norm that today's recurrent layers put
around their op, one class per attention name (``encoder.layer: recipe``). Importing registers them."""

from lintf.layers.delta_net import DeltaNetLayer
from lintf.layers.delta_rule_layer import DeltaRuleLayer
from lintf.layers.gated_delta_net import GatedDeltaNetLayer
from lintf.layers.gated_linear import GatedLinearLayer
from lintf.layers.gated_rms_norm import GatedRMSNorm
from lintf.layers.gla import GLALayer
from lintf.layers.linear import LinearLayer
from lintf.layers.recipe import RecipeLayer, RecipeState
from lintf.layers.retention import RetentionLayer
from lintf.layers.short_conv import ShortConvolution
from lintf.layers.softmax import SoftmaxLayer, SoftmaxLayerState

__all__ = ["DeltaNetLayer", "DeltaRuleLayer", "GLALayer", "GatedDeltaNetLayer", "GatedLinearLayer", "GatedRMSNorm",
           "LinearLayer", "RecipeLayer", "RecipeState", "RetentionLayer", "ShortConvolution",
           "SoftmaxLayer", "SoftmaxLayerState"]
