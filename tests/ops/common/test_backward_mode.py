"""The one rule by which every compiled op's forward keeps chunk states for its backward."""

import pytest
import torch

from lintf.ops.common.backward_mode import keeps_states_for_cpu_backward


@pytest.mark.parametrize(("mode", "state_bytes", "kept"), [
    ("auto", 100, True), ("auto", 200, False), ("stored", 10_000, True), ("recompute", 1, False)])
def test_cpu_inputs_that_need_a_backward_follow_the_mode(monkeypatch, mode, state_bytes, kept):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    q = torch.zeros(2, requires_grad=True)
    assert keeps_states_for_cpu_backward((q, None), state_bytes, input_bytes=800) == kept  # auto: <= 1/8


def test_an_op_whose_auto_share_is_zero_keeps_states_only_when_stored(monkeypatch):
    q = torch.zeros(2, requires_grad=True)
    for mode, kept in (("auto", False), ("stored", True), ("recompute", False)):
        monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
        assert keeps_states_for_cpu_backward((q,), 1, input_bytes=800, auto_share=0.0) == kept


def test_nothing_is_kept_without_a_backward_or_off_the_cpu(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", "stored")
    assert not keeps_states_for_cpu_backward((torch.zeros(2), None), 1, 800)  # nothing requires grad
    with torch.no_grad():
        assert not keeps_states_for_cpu_backward((torch.zeros(2, requires_grad=True),), 1, 800)
    meta = torch.zeros(2, device="meta", requires_grad=True)
    assert not keeps_states_for_cpu_backward((meta,), 1, 800)  # only the CPU backward reads kept states
    initial_state = torch.zeros(2, requires_grad=True)  # a state that needs a gradient is an input like the others
    assert keeps_states_for_cpu_backward((torch.zeros(2), initial_state), 1, 800)


def test_a_bad_mode_is_refused(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", "sometimes")
    with pytest.raises(ValueError, match="LINTF_CPU_BACKWARD='sometimes' is not valid: use one of recompute"):
        keeps_states_for_cpu_backward((torch.zeros(2, requires_grad=True),), 1, 800)
