"""Registry behaviour: registration, overriding, listing, building and its error messages."""

from __future__ import annotations

import pytest

import lintf
from lintf.attention import Attention
from lintf.feature_maps import FeatureMap
from lintf.registry import ATTENTIONS, FEATURE_MAPS, UnknownArgumentError, UnknownNameError


@pytest.fixture
def scratch_name():
    name = "test-scratch"
    yield name
    for registry in (ATTENTIONS, FEATURE_MAPS):
        if name in registry:
            registry.unregister(name)


def test_builtins_are_registered_on_import():
    assert {"softmax", "linear", "polynomial", "reformer"} <= set(lintf.list_attentions())
    assert {"elu", "relu", "favor", "polynomial"} <= set(lintf.list_feature_maps())
    assert lintf.list_attentions() == sorted(lintf.list_attentions())
    assert lintf.list_feature_maps() == sorted(lintf.list_feature_maps())


def test_register_feature_map_and_build(scratch_name):
    @lintf.register_feature_map(scratch_name)
    class Square(FeatureMap):
        def forward(self, x):
            return x * x

    assert scratch_name in lintf.list_feature_maps()
    built = lintf.build_feature_map(scratch_name, 4)
    assert isinstance(built, Square) and built.dim == 4


def test_registering_a_taken_name_raises_unless_override(scratch_name):
    @lintf.register_attention(scratch_name)
    class First(Attention):
        pass

    with pytest.raises(ValueError, match="already registered.*override=True"):

        @lintf.register_attention(scratch_name)
        class Second(Attention):
            pass

    @lintf.register_attention(scratch_name, override=True)
    class Third(Attention):
        pass

    assert ATTENTIONS.get(scratch_name) is Third


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownNameError) as error:
        lintf.build_attention("linaer", head_dim=4)
    message = str(error.value)
    assert "'linaer'" in message
    for name in lintf.list_attentions():
        assert name in message
    with pytest.raises(KeyError, match="unknown feature map 'eluu'.*elu, favor"):
        lintf.build_feature_map("eluu", 4)


def test_unknown_kwarg_names_class_and_accepted_arguments():
    with pytest.raises(UnknownArgumentError) as error:
        lintf.build_attention("reformer", head_dim=4, n_hash=2)
    message = str(error.value)
    assert "ReformerAttention" in message and "n_hash" in message
    assert "n_hashes" in message and "chunk_size" in message
    with pytest.raises(TypeError, match="FavorFeatureMap.*n_feature.*accepts: dim, n_features"):
        lintf.build_feature_map("favor", 4, n_feature=8)


def test_bad_registry_name_is_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        lintf.register_attention("")
