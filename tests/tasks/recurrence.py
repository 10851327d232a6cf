"""Shared check for tasks: decoding with ``step`` reproduces the parallel ``forward``."""

import torch


def assert_steps_match_forward(task, tokens: torch.Tensor, tolerance: float) -> None:
    """Feed ``tokens`` (B, N) through ``task.step`` one position at a time and compare with ``task(tokens)``."""
    parallel = task(tokens)
    state = task.init_state(tokens.shape[0])
    for t in range(tokens.shape[1]):
        params, state = task.step(tokens[:, t], t, state)
        torch.testing.assert_close(params, parallel[:, t], rtol=tolerance, atol=tolerance)
