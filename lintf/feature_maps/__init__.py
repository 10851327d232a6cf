"""Feature maps phi, one file per registry key. Importing this package registers them all."""

from lintf.feature_maps.base import FeatureMap
from lintf.feature_maps.dpfp import DPFPFeatureMap
from lintf.feature_maps.elu import EluFeatureMap
from lintf.feature_maps.favor import FavorFeatureMap
from lintf.feature_maps.hedgehog import HedgehogFeatureMap
from lintf.feature_maps.polynomial import PolynomialFeatureMap
from lintf.feature_maps.relu import ReluFeatureMap
from lintf.feature_maps.t2r import T2RFeatureMap
from lintf.feature_maps.taylor import TaylorFeatureMap

__all__ = [
    "DPFPFeatureMap",
    "EluFeatureMap",
    "FavorFeatureMap",
    "FeatureMap",
    "HedgehogFeatureMap",
    "PolynomialFeatureMap",
    "ReluFeatureMap",
    "T2RFeatureMap",
    "TaylorFeatureMap",
]
