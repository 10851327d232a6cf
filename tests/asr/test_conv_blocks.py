"""DepthwiseConvBlocks: each block sees kernel_size // 2 frames either side, never padding; bad kernels are refused."""

import pytest
import torch

from lintf.asr.model.conv_blocks import DepthwiseConvBlocks


def test_receptive_field_is_blocks_times_half_kernel():
    torch.manual_seed(0)
    blocks = DepthwiseConvBlocks(d_model=8, n_blocks=2, kernel_size=5).eval()
    x = torch.randn(1, 40, 8)
    changed = x.clone()
    changed[0, 20] += torch.randn(8)  # not a constant shift, which LayerNorm would remove
    moved = (blocks(changed) - blocks(x)).abs().sum(-1)[0]  # (T,)
    reach = 2 * (5 // 2)
    assert (moved[20 - reach : 21 + reach] > 0).all()
    assert moved[: 20 - reach].eq(0).all() and moved[21 + reach :].eq(0).all()


def test_padded_frames_do_not_reach_valid_ones():
    torch.manual_seed(0)
    blocks = DepthwiseConvBlocks(d_model=8, n_blocks=3, kernel_size=7).eval()
    x = torch.randn(1, 30, 8)
    padding = torch.arange(30)[None, :] >= 18  # (1, T)
    noisy = x.clone()
    noisy[0, 18:] = 100.0 * torch.randn(12, 8)
    out = blocks(noisy, padding)
    torch.testing.assert_close(out[0, :18], blocks(x[:, :18])[0])
    assert out[0, 18:].eq(0).all()


def test_zero_blocks_is_identity_and_bad_arguments_fail():
    x = torch.randn(2, 5, 4)
    assert torch.equal(DepthwiseConvBlocks(4, 0, 3)(x), x)
    with pytest.raises(ValueError, match="odd"):
        DepthwiseConvBlocks(4, 1, 4)
    with pytest.raises(ValueError, match="n_blocks"):
        DepthwiseConvBlocks(4, -1, 3)
