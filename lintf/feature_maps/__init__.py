"""Feature maps phi, one file per registry key. Importing this package registers them all."""

from lintf.feature_maps.base import FeatureMap
from lintf.feature_maps.elu import EluFeatureMap
from lintf.feature_maps.favor import FavorFeatureMap
from lintf.feature_maps.polynomial import PolynomialFeatureMap
from lintf.feature_maps.relu import ReluFeatureMap

__all__ = ["EluFeatureMap", "FavorFeatureMap", "FeatureMap", "PolynomialFeatureMap", "ReluFeatureMap"]
