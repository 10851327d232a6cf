"""--model.init_from DIR: a directory's weights and tokenizer start a task; another model is refused with
what differs; only JSON and safetensors are read."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from lintf.data.tokenizers import CharTokenizer  # noqa: E402
from lintf.hf.settings import model_weights  # noqa: E402
from lintf.tasks import AutoregressiveTask, StreamLanguageModelTask  # noqa: E402
from tests.hf.helpers import TEXT, export, text_task, tiny_encoder, token_task  # noqa: E402


def test_a_task_starts_from_the_directory_weights_and_tokenizer(tmp_path):
    task, tokenizer = text_task("gla")
    directory = export(task, tokenizer, tmp_path)
    torch.manual_seed(1)  # another initialisation, which init_from replaces
    started = StreamLanguageModelTask(tokenizer.vocab_size, 256, tiny_encoder("gla"), init_from=str(directory))
    expected = model_weights(task)
    assert {key: value for key, value in model_weights(started).items()}.keys() == expected.keys()
    assert all(torch.equal(value, expected[key]) for key, value in model_weights(started).items())
    assert started.init_tokenizer.to_dict() == tokenizer.to_dict()
    assert "init_from" not in started.hparams  # checkpoints carry the weights, not the directory's path


def test_another_model_is_refused_with_what_differs(tmp_path):
    directory = export(token_task("linear"), None, tmp_path)
    with pytest.raises(ValueError) as error:
        AutoregressiveTask(13, 24, tiny_encoder("gla", n_layers=2), positions="learned", init_from=str(directory))
    assert "encoder.attention: 'linear' in" in str(error.value) and "'gla' here" in str(error.value)
    with pytest.raises(ValueError, match="vocab_size: 13 in .*, 14 here"):
        AutoregressiveTask(14, 24, tiny_encoder("linear"), positions="learned", init_from=str(directory))
    with pytest.raises(ValueError, match=r"positions.embedding: shape \(24, 16\) in .*, \(30, 16\) here"):
        AutoregressiveTask(13, 30, tiny_encoder("linear"), positions="learned", init_from=str(directory))


def test_directories_of_other_models_and_missing_ones_are_refused(tmp_path):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model of type 'gpt2'"):
        AutoregressiveTask(13, 24, tiny_encoder(), init_from=str(tmp_path / "gpt2"))
    with pytest.raises(ValueError, match="is not a directory"):
        AutoregressiveTask(13, 24, tiny_encoder(), init_from=str(tmp_path / "absent"))
    directory = export(token_task("linear"), None, tmp_path / "lintf")
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ValueError, match="holds no model.safetensors"):
        AutoregressiveTask(13, 24, tiny_encoder(), positions="learned", init_from=str(directory))


@pytest.mark.slow
def test_fit_trains_on_from_an_exported_directory(tmp_path, monkeypatch):
    from tests.cli.helpers import REPO, quiet_trainer, run

    monkeypatch.chdir(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text(TEXT * 100)
    tokenizer = CharTokenizer(TEXT)
    torch.manual_seed(0)
    encoder = tiny_encoder(n_layers=1)
    source = StreamLanguageModelTask(tokenizer.vocab_size, 64, encoder)
    directory = export(source, tokenizer, tmp_path / "exported")
    fitted = run(["fit", "--config", str(REPO / "configs" / "stream_lm.yaml"), "--data.init_args.path", str(text),
                  "--data.init_args.eval_length", "64", "--data.init_args.batch_size", "2",
                  "--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
                  "--model.init_args.encoder.n_heads", "2", "--model.init_args.init_from", str(directory),
                  *quiet_trainer(tmp_path), "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
                  "--model.init_args.lr_scheduler.init_args.total_steps", "10"])
    assert fitted.trainer.global_step == 1
    assert fitted.datamodule.tokenizer is fitted.model.init_tokenizer
    expected = model_weights(source)
    largest_change = max(float((value.cpu() - expected[key]).abs().max())
                         for key, value in model_weights(fitted.model).items())
    assert 0 < largest_change < 0.01  # one small step from the directory's weights, not from a new initialisation
