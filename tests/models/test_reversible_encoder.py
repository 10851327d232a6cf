"""EncoderConfig(reversible=True): stepping equals the parallel forward, gradients equal plain autograd of the
same coupling, the graph holds no per-layer activations, post-norm is refused, and the CLI trains and samples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lintf.models import EncoderConfig, TransformerEncoder
from tests.cli.helpers import tiny
from tests.models.test_transformer import continuing_attention_names, run_recurrently
from tests.conftest import exact_step_attention_names

SMALL = dict(d_model=16, n_layers=3, n_heads=2, dropout=0.0, reversible=True)


def coupled_by_hand(model: TransformerEncoder, x: torch.Tensor, causal: bool, padding: torch.Tensor | None):
    """The reversible stack written out from the layers' modules, every activation kept by autograd."""
    x1 = x2 = x
    for layer in model.layers:
        attended, _ = layer.attention(layer.attention_norm(x2), causal, padding)
        x1 = x1 + layer.dropout(attended)
        x2 = x2 + layer.dropout(layer.feed_forward(layer.feed_forward_norm(x1)))
    return model.final_norm((x1 + x2) / 2)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).detach().norm() / want.detach().norm())


@pytest.mark.parametrize("name", exact_step_attention_names())
def test_recurrent_stepping_equals_parallel_forward(name):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name)).double().eval()
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(run_recurrently(model, x), model(x, causal=True), atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("name", continuing_attention_names())
def test_prefill_then_step_or_forward_continues_the_whole_sequence(name):
    model = TransformerEncoder(EncoderConfig(**SMALL, attention=name)).double().eval()
    x, split = torch.randn(2, 12, 16, dtype=torch.float64), 5
    with torch.no_grad():
        whole = model(x, causal=True)
        prefix, state = model.prefill(x[:, :split])
        stepped, _ = model.step(x[:, split], state)
        rest, _ = model(x[:, split:], causal=True, state=state, return_state=True)
    torch.testing.assert_close(prefix, whole[:, :split], atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(stepped, whole[:, split], atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(rest, whole[:, split:], atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize(("name", "causal"), [("linear", True), ("linear", False), ("softmax", True),
                                              ("softmax", False)])
def test_gradients_equal_plain_autograd_of_the_same_coupling(name, causal):
    """fp64, training mode with dropout (replayed in the recomputation), padding in the bidirectional case."""
    model = TransformerEncoder(EncoderConfig(**{**SMALL, "dropout": 0.2}, attention=name)).double().train()
    x = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    padding = None if causal else torch.arange(9).expand(2, 9) >= torch.tensor([[9], [6]])
    upstream = torch.randn(2, 9, 16, dtype=torch.float64)
    results = []
    for run in (lambda: coupled_by_hand(model, x, causal, padding), lambda: model(x, causal, padding)):
        torch.manual_seed(3)
        out = run()
        results.append((out, torch.autograd.grad(out, (x, *model.parameters()), upstream)))
    (want, want_grads), (got, got_grads) = results
    assert relative_error(got, want) < 1e-12
    flat = [torch.cat([g.reshape(-1) for g in grads]) for grads in (got_grads, want_grads)]
    assert relative_error(*flat) < 1e-8
    assert relative_error(got_grads[0], want_grads[0]) < 1e-8  # the input's gradient, through both copies


def saved_tensor_count(n_layers: int, reversible: bool) -> int:
    model = TransformerEncoder(EncoderConfig(**{**SMALL, "n_layers": n_layers, "reversible": reversible})).train()
    x = torch.randn(2, 9, 16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        model(x, causal=True)
    return len(saved)


def test_training_stores_no_activations_per_layer():
    assert saved_tensor_count(4, reversible=True) == saved_tensor_count(1, reversible=True)
    assert saved_tensor_count(4, reversible=False) > saved_tensor_count(1, reversible=False)


def test_post_norm_is_refused():
    with pytest.raises(ValueError, match="reversible=true needs norm 'pre', got norm 'post': a post-norm residual "
                                         "cannot be inverted"):
        EncoderConfig(reversible=True, norm="post")


def lintf_command(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LINTF_EXTENSION": "off"}
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", *args], capture_output=True, text=True, env=env,
                          cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_the_cli_trains_predicts_and_generates_reversibly(tmp_path):
    options = ["--model.encoder.reversible", "true", "--model.encoder.n_layers", "2", "--trainer.max_steps", "3"]
    lintf_command(tmp_path, *tiny(tmp_path, *options))
    checkpoint = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(checkpoint, weights_only=True)["hyper_parameters"]["encoder"]["reversible"] is True
    lintf_command(tmp_path, *tiny(tmp_path, *options, "--ckpt_path", "last", subcommand="predict"))
    assert (checkpoint.parents[1] / "predictions" / "predictions.jsonl").read_text().count("\n") == 16
    generated = lintf_command(tmp_path, "generate", "--ckpt_path", str(checkpoint), "--prompt", "3 1 4",
                              "--temperature", "0")
    assert generated.stdout.startswith("3 1 4 SEP ")
