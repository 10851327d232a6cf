"""Output heads over byte values, one file per registry key. Importing registers them."""

from lintf.heads.base import OutputHead
from lintf.heads.categorical import CategoricalHead
from lintf.heads.logistic_mixture import LogisticMixtureHead

__all__ = ["CategoricalHead", "LogisticMixtureHead", "OutputHead"]
