"""Shared fixtures: every registered attention / feature map, built with its defaults."""

from __future__ import annotations

import pytest
import torch

import lintf
from lintf.plugins import load_entry_point_plugins
from lintf.registry import ATTENTIONS

load_entry_point_plugins()  # installed plugins join every registry-parametrized test

HEAD_DIM = 8


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _data_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Datasets fetched by a test go to a temporary cache, never the user's (~/.cache/lintf)."""
    monkeypatch.setenv("LINTF_DATA", str(tmp_path_factory.getbasetemp() / "lintf-data"))


def attention_names() -> list[str]:
    return lintf.list_attentions()


def feature_map_names() -> list[str]:
    return lintf.list_feature_maps()


def exact_step_attention_names() -> list[str]:
    return [n for n in causal_attention_names() if ATTENTIONS.get(n).step_matches_forward]


def causal_attention_names() -> list[str]:
    return [n for n in lintf.list_attentions() if ATTENTIONS.get(n).supports_causal]


def non_causal_only_attention_names() -> list[str]:
    return [n for n in lintf.list_attentions() if not ATTENTIONS.get(n).supports_causal]


def build(name: str, head_dim: int = HEAD_DIM, **kwargs):
    return lintf.build_attention(name, head_dim=head_dim, **kwargs).eval()


def random_qkv(
    batch: int = 2, heads: int = 3, n: int = 12, s: int | None = None, d: int = HEAD_DIM, m: int = 5, dtype=torch.float32
):
    s = n if s is None else s
    q = torch.randn(batch, heads, n, d, dtype=dtype)
    k = torch.randn(batch, heads, s, d, dtype=dtype)
    v = torch.randn(batch, heads, s, m, dtype=dtype)
    return q, k, v


def qkv_for(attention, m: int = 5, **kwargs):
    """random_qkv with values of the head size where the attention requires M == D."""
    return random_qkv(m=attention.head_dim if attention.value_dim_is_head_dim else m, **kwargs)


def run_seeded(attention, *args, seed: int = 1234, **kwargs):
    """Call ``attention`` with a fixed RNG state (reformer draws random rotations per call)."""
    torch.manual_seed(seed)
    return attention(*args, **kwargs)
