"""The two ways the compiled CPU backward gets its chunk states, as a fixture for the tests that cover both."""

from __future__ import annotations

import pytest

from lintf.ops.causal import compiled

# Kept states every 64 positions in the tests, so their tiny sequences span several of them.
TEST_STATES_EVERY = 64


@pytest.fixture(params=["recompute", "stored"])
def backward_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force LINTF_CPU_BACKWARD for the test; ``stored`` keeps a state every TEST_STATES_EVERY positions."""
    monkeypatch.setenv("LINTF_CPU_BACKWARD", request.param)
    monkeypatch.setattr(compiled, "STATES_EVERY", TEST_STATES_EVERY)
    return request.param
