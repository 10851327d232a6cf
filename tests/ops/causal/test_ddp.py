"""A 2-process ddp_spawn (gloo) training step through the compiled op."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn

from lintf.ops import causal_linear_attention, compiled_op_available


class TinyCausalModel(L.LightningModule):
    """One causal linear-attention layer with elu+1 features, trained to regress a target."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, N, D) each
        q, k = nn.functional.elu(q) + 1, nn.functional.elu(k) + 1
        return causal_linear_attention(q, k, v).transpose(1, 2).reshape(b, n, d)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("compiled_op", float(compiled_op_available("cpu")), sync_dist=True)
        self.log("world_size", float(self.trainer.world_size))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.slow
@pytest.mark.usefixtures("compiled_op")
def test_ddp_spawn_training_step(tmp_path, monkeypatch):
    """Both ranks start with an empty extension cache, so they build concurrently (serialised by
    the build lock) before the training step."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    monkeypatch.setenv("LINTF_EXTENSION_DIR", str(tmp_path / "no-prebuilt"))
    data = torch.utils.data.TensorDataset(torch.randn(8, 40, 8), torch.randn(8, 40, 8))
    model = TinyCausalModel()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=2))
    assert trainer.callback_metrics["world_size"] == 2
    assert trainer.callback_metrics["compiled_op"] == 1.0  # both ranks ran the compiled op
    assert len(list((tmp_path / "extensions" / "lintf").glob("*/lintf_causal_product.so"))) == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
