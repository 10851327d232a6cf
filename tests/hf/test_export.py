"""`lintf export` on tiny checkpoints: the directory loads with transformers' Auto classes and pipeline
without unpickling, generates what `lintf generate --temperature 0` prints, survives save_pretrained, and
what it cannot express is refused in one paragraph."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline  # noqa: E402

from lintf.data.tokenizers import BPETokenizer, ByteTokenizer  # noqa: E402
from lintf.models import EncoderConfig  # noqa: E402
from lintf.run.cli import main  # noqa: E402
from lintf.tasks import ImageGenerationTask  # noqa: E402
from tests.generation.test_command import save_run, text_run  # noqa: E402
from tests.hf.helpers import TEXT, export, text_task  # noqa: E402


def lintf_export(args: list[str]) -> None:
    main(["export", *args])


def refused(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        lintf_export(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("lintf export: error:")]
    return line


def forbid_unpickling(monkeypatch) -> None:
    """From here on, any unpickling (pickle, torch.load) fails the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a model directory was unpickled")

    for module, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(module, name, forbidden)


@pytest.fixture
def no_unpickling(monkeypatch):
    forbid_unpickling(monkeypatch)


def test_exported_text_model_generates_what_lintf_generate_prints(tmp_path, capsys, monkeypatch):
    path, task, tokenizer = text_run(tmp_path / "run")
    directory = tmp_path / "exported"
    lintf_export(["--ckpt_path", str(path), "--output", str(directory)])
    files = sorted(p.name for p in directory.iterdir())
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"} <= set(files)
    assert not [name for name in files if name.endswith((".py", ".bin", ".pt", ".ckpt"))]
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "lintf" and "auto_map" not in config
    assert config["encoder"] == task.encoder_config.to_dict() and config["vocab_size"] == tokenizer.vocab_size

    main(["generate", "--ckpt_path", str(path), "--prompt", "in the ", "--max_new_tokens", "20", "--temperature", "0"])
    printed = capsys.readouterr().out.rstrip("\n")
    forbid_unpickling(monkeypatch)  # lintf read its checkpoint (tensors only); the directory is read from here
    model = AutoModelForCausalLM.from_pretrained(directory)
    hf_tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = hf_tokenizer("in the ", return_tensors="pt").input_ids
    assert ids[0].tolist() == tokenizer.encode("in the ")
    generated = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert hf_tokenizer.decode(generated[0]) == printed
    text = pipeline("text-generation", model=str(directory))("in the ", max_new_tokens=20, do_sample=False)
    assert text[0]["generated_text"] == printed


def test_save_pretrained_round_trips(tmp_path, no_unpickling):
    task, tokenizer = text_task("gated_linear")
    model = AutoModelForCausalLM.from_pretrained(export(task, tokenizer, tmp_path / "a"))
    model.save_pretrained(tmp_path / "b")
    AutoTokenizer.from_pretrained(tmp_path / "a").save_pretrained(tmp_path / "b")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "b")
    assert again.config.settings() == model.config.settings() and again.config.task == model.config.task
    tokens = torch.tensor([tokenizer.encode("the word")])
    with torch.no_grad():
        assert torch.equal(again(tokens).logits, model(tokens).logits)
    assert AutoTokenizer.from_pretrained(tmp_path / "b")("was with").input_ids == tokenizer.encode("was with")


@pytest.mark.parametrize("kind", ["bpe", "bytes"])
def test_bpe_and_byte_tokenizers_give_lintf_ids_and_text(kind, tmp_path, no_unpickling):
    tokenizer = BPETokenizer.train(TEXT * 4, 280) if kind == "bpe" else ByteTokenizer()
    torch.manual_seed(0)
    from lintf.tasks import StreamLanguageModelTask
    from tests.hf.helpers import tiny_encoder

    task = StreamLanguageModelTask(tokenizer.vocab_size, 32, tiny_encoder()).eval()
    directory = export(task, tokenizer, tmp_path)
    assert (directory / "tokenizer.json").is_file() == (kind == "bpe")
    hf_tokenizer = AutoTokenizer.from_pretrained(directory)
    text = "the word was with god, é"
    assert hf_tokenizer(text).input_ids == tokenizer.encode(text)
    assert hf_tokenizer.decode(tokenizer.encode(text)) == tokenizer.decode(tokenizer.encode(text))


def test_copy_model_exports_without_a_tokenizer(tmp_path):
    from lintf.tasks import CopyTask
    from tests.generation.test_command import TINY

    torch.manual_seed(0)
    task = CopyTask(12, 24, TINY).eval()
    path = save_run(tmp_path, task)
    lintf_export(["--ckpt_path", str(path), "--output", str(tmp_path / "copy")])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "copy")
    tokens = torch.randint(0, 12, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens).logits, task(tokens), rtol=0, atol=1e-5)
    assert not (tmp_path / "copy" / "tokenizer_config.json").exists()


def test_a_mixture_head_and_a_used_directory_are_refused(tmp_path, capsys):
    torch.manual_seed(0)
    image = ImageGenerationTask(256, 783, EncoderConfig(d_model=8, n_layers=1, n_heads=2, dropout=0.0)).eval()
    path = save_run(tmp_path / "image", image)
    line = refused(["--ckpt_path", str(path), "--output", str(tmp_path / "out")], capsys)
    assert "'logistic_mixture' head" in line and "--model.head categorical" in line
    assert not (tmp_path / "out").exists()
    text_path, _, _ = text_run(tmp_path / "text")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "config.json").write_text("{}")
    line = refused(["--ckpt_path", str(text_path), "--output", str(tmp_path / "used")], capsys)
    assert "is not an empty directory" in line
    line = refused(["--ckpt_path", str(tmp_path / "missing.ckpt"), "--output", str(tmp_path / "out")], capsys)
    assert "checkpoint not found" in line


def test_unknown_attention_names_are_refused_not_imported(tmp_path):
    task, tokenizer = text_task()
    directory = export(task, tokenizer, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["encoder"]["attention"] = "os.system"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(KeyError, match="unknown attention 'os.system'"):
        AutoModelForCausalLM.from_pretrained(directory)
    config["encoder"]["attention"] = "linear"
    config["encoder"]["attention_kwargs"] = {"class_path": "os.system"}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="class_path"):
        AutoModelForCausalLM.from_pretrained(directory)


def test_an_image_model_with_a_categorical_head_exports_with_its_raster_positions(tmp_path):
    torch.manual_seed(0)
    image = ImageGenerationTask(256, 47, EncoderConfig(d_model=8, n_layers=1, n_heads=2, dropout=0.0),
                                positions="raster", row_bytes=12, head="categorical").eval()
    model = AutoModelForCausalLM.from_pretrained(export(image, None, tmp_path))
    assert model.config.positions == "raster" and model.config.row_bytes == 12
    pixels = torch.randint(0, 256, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(model(pixels).logits, image(pixels), rtol=0, atol=1e-5)
