"""Corpus builders: flite synthesis (held-out voice and sentences), LibriVox manifest, ``lintf data``."""

import json
import os
import random
import shutil
import wave

import pytest

from lintf.asr.corpora.czech_dialogue import GAME_DATA_DIR, build_czech_dialogue_corpus, transcripts
from lintf.asr.corpora.librivox import LIBRIVOX_DIR, build_librivox_manifest
from lintf.asr.corpora.manifest import read_manifest
from lintf.asr.corpora.sentences import language_model_text, split_sentences
from lintf.asr.corpora.synthetic import build_synth_corpus
from lintf.asr.corpora.voices import ESPEAK_ACCENTS, ESPEAK_VARIANTS, FESTIVAL_VOICES, concrete_voice, parse_voice
from lintf.run.cli import main

needs_flite = pytest.mark.skipif(shutil.which("flite") is None, reason="apt-get install flite")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="apt-get install espeak-ng")
needs_ked = pytest.mark.skipif(shutil.which("text2wave") is None or not os.path.isdir(FESTIVAL_VOICES["ked"][2]),
                               reason="apt-get install festival festvox-kdlpc16k")


def test_split_sentences_is_disjoint_and_checks_size():
    splits = split_sentences([f"s{i}" for i in range(10)], {"train": 5, "val": 2, "test": 3}, seed=0)
    assert [len(v) for v in splits.values()] == [5, 2, 3]
    assert len(set(sum(splits.values(), []))) == 10
    with pytest.raises(ValueError, match="asked for 11 distinct sentences"):
        split_sentences(["a"] * 10, {"train": 11}, seed=0)


def test_language_model_text_leaves_out_the_verses_of_held_out_sentences(tmp_path):
    book = tmp_path / "book.jsonl"
    verses = ["In the beginning God created. And it was good!", "The earth was void; and darkness was upon it.",
              "Let there be light: and there was light.", "Numbers 3 and 4."]
    book.write_text("".join(json.dumps({"text": v}) + "\n" for v in verses))
    text = language_model_text(book, held_out=["and darkness was upon it", "not in the book"])
    assert text == ["in the beginning god created", "and it was good", "let there be light", "and there was light"]
    assert len(language_model_text(book, held_out=[])) == 6  # the verse with digits gives nothing


@needs_flite
def test_synth_corpus_holds_out_voice_and_sentences(tmp_path):
    manifests = build_synth_corpus(tmp_path, train_size=4, val_size=2, test_size=2,
                                   train_voices=("kal", "slt"), test_voice="awb", dev_voice=None, max_words=5)
    rows = {split: read_manifest(path) for split, path in manifests.items()}
    texts = {split: {e.text for e in entries} for split, entries in rows.items()}
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["val"]
    voices = {split: {json.loads(line)["voice"] for line in path.read_text().splitlines()} for split, path in manifests.items()}
    assert voices["test"] == {"awb"} and voices["train"] == {"kal", "slt"}
    lm_text = set((tmp_path / "lm.txt").read_text().splitlines())  # the book without the evaluation sentences
    assert texts["train"] <= lm_text and not (texts["val"] | texts["test"]) & lm_text and len(lm_text) > 40_000
    for entry in rows["train"]:  # kal speaks at 8 kHz: resampled
        with wave.open(str(entry.audio_filepath)) as file:
            assert file.getframerate() == 16_000
            assert abs(file.getnframes() / 16_000 - entry.duration) < 1e-3


@needs_flite
@needs_espeak
def test_synth_corpus_mixes_espeak_voices_and_holds_out_a_variant(tmp_path):
    manifests = build_synth_corpus(tmp_path, train_size=6, val_size=1, test_size=2, max_words=4,
                                   train_voices=("slt", "espeak:*"), test_voice="espeak:en-gb+m3", dev_voice=None)
    voices = {split: [json.loads(line)["voice"] for line in path.read_text().splitlines()] for split, path in manifests.items()}
    assert voices["test"] == ["espeak:en-gb+m3"] * 2
    assert voices["train"][0::2] == ["slt"] * 3
    assert all(v.startswith("espeak:") and not v.endswith("+m3") for v in voices["train"][1::2])
    for entry in read_manifest(manifests["train"]):  # espeak-ng writes 22.05 kHz: resampled
        with wave.open(str(entry.audio_filepath)) as file:
            assert file.getframerate() == 16_000 and file.getnframes() > 8_000


@needs_flite
@needs_ked
def test_synth_corpus_speaks_festival_voices_at_the_drawn_rate(tmp_path):
    def corpus(out, slowness):
        manifests = build_synth_corpus(out, train_size=2, val_size=1, test_size=1, max_words=5,
                                       train_voices=("festival:ked",), test_voice="slt", dev_voice=None,
                                       train_slowness=slowness)
        return [json.loads(line) for line in manifests["train"].read_text().splitlines()]

    normal, slow = corpus(tmp_path / "normal", (1.0, 1.0)), corpus(tmp_path / "slow", (1.5, 1.5))
    assert [row["voice"] for row in normal] == ["festival:ked"] * 2
    assert all(1.3 < s["duration"] / n["duration"] < 1.6 for s, n in zip(slow, normal))
    for row in normal:  # festival's ked speaks at 16 kHz
        with wave.open(str(tmp_path / "normal" / row["audio_filepath"])) as file:
            assert file.getframerate() == 16_000 and file.getnframes() > 8_000


@needs_flite
@needs_ked
def test_synth_dev_split_is_a_second_held_out_voice_on_new_sentences(tmp_path):
    manifests = build_synth_corpus(tmp_path, train_size=3, val_size=1, test_size=2, dev_size=2, max_words=5,
                                   train_voices=("kal",), test_voice="awb", dev_voice="festival:ked")
    rows = {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in manifests.items()}
    assert [row["voice"] for row in rows["dev"]] == ["festival:ked"] * 2
    texts = [{row["text"] for row in split_rows} for split_rows in rows.values()]
    assert sum(map(len, texts)) == len(set().union(*texts)) == 8  # every sentence in one split only
    without_dev = build_synth_corpus(tmp_path / "no_dev", train_size=3, val_size=1, test_size=2, max_words=5,
                                     train_voices=("kal",), test_voice="awb", dev_voice=None)
    assert "dev" not in without_dev  # and the other splits are unchanged by the dev split:
    assert [(e.text, e.duration) for e in read_manifest(without_dev["test"])] == \
        [(e.text, e.duration) for e in read_manifest(manifests["test"])]


def test_random_espeak_voices_cover_the_pool_except_the_held_out_variant():
    drawn = {concrete_voice(parse_voice("espeak:*"), random.Random(i), ("f2",)).name for i in range(3000)}
    accents = {name.split("+")[0] for name in drawn}
    variants = {name.split("+")[1] for name in drawn}
    assert accents == set(ESPEAK_ACCENTS) and variants == set(ESPEAK_VARIANTS) - {"f2"}


@needs_flite
def test_synth_speaking_rate_ranges_apply_to_their_splits(tmp_path):
    def durations(out, train_slowness):
        manifests = build_synth_corpus(out, train_size=2, val_size=1, test_size=1, train_voices=("kal",),
                                       test_voice="awb", dev_voice=None, max_words=6, train_slowness=train_slowness,
                                       test_slowness=(1.0, 1.0))
        return {split: [e.duration for e in read_manifest(path)] for split, path in manifests.items()}

    normal, slow = durations(tmp_path / "normal", (1.0, 1.0)), durations(tmp_path / "slow", (1.6, 1.6))
    for split in ("train", "val"):  # same sentences and voice, spoken 1.6x as long (silences unchanged)
        assert all(1.3 < s / n < 1.7 for s, n in zip(slow[split], normal[split]))
    assert slow["test"] == normal["test"]
    with pytest.raises(ValueError, match="train_slowness must be \\(low, high\\) with 0.5 <= low <= high"):
        build_synth_corpus(tmp_path, train_slowness=(1.2, 0.9))


def test_synth_rejects_bad_voices(tmp_path):
    with pytest.raises(ValueError, match="unknown voice 'bob'"):
        build_synth_corpus(tmp_path, test_voice="bob")
    with pytest.raises(ValueError, match="unknown espeak voice 'en-xx\\+m1'.*en-gb-scotland"):
        build_synth_corpus(tmp_path, train_voices=("espeak:en-xx+m1",))
    with pytest.raises(ValueError, match="must be held out"):
        build_synth_corpus(tmp_path, train_voices=("slt",), test_voice="flite:slt")
    with pytest.raises(ValueError, match="dev_voice 'flite:slt' must be held out"):
        build_synth_corpus(tmp_path, train_voices=("slt",), dev_voice="slt")
    with pytest.raises(ValueError, match="dev_voice and test_voice must differ, both are 'flite:rms'"):
        build_synth_corpus(tmp_path, dev_voice="rms")
    with pytest.raises(ValueError, match="unknown festival voice 'kal': use one of ked"):
        build_synth_corpus(tmp_path, train_voices=("festival:kal",))
    with pytest.raises(ValueError, match="one voice, not 'espeak:\\*'"):
        build_synth_corpus(tmp_path, test_voice="espeak:*")


def test_missing_flite_names_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "synth-speech", "--out", str(tmp_path / "c"), "--train_size", "1"])
    assert exit_info.value.code == 2
    assert "apt-get install -y flite" in capsys.readouterr().err


@needs_flite
def test_missing_festival_voice_names_its_package(tmp_path, monkeypatch):
    monkeypatch.setitem(FESTIVAL_VOICES, "ked", ("voice_ked_diphone", "festvox-kdlpc16k", str(tmp_path / "none")))
    monkeypatch.setattr(shutil, "which", lambda program: f"/usr/bin/{program}")  # festival itself "installed"
    with pytest.raises(RuntimeError, match="none does not exist; install it with: sudo apt-get install -y festvox-kdlpc16k"):
        build_synth_corpus(tmp_path / "c", train_size=1, val_size=1, test_size=1)


@pytest.mark.skipif(not os.path.isdir(LIBRIVOX_DIR), reason="apt-get install pocketsphinx-testdata")
def test_librivox_manifest(tmp_path, capsys):
    main(["data", "librivox", "--out", str(tmp_path / "librivox.jsonl")])
    entries = read_manifest(tmp_path / "librivox.jsonl")
    assert len(entries) == 5 and entries[1].text == "he was not an ill disposed young man"
    assert "librivox: 5 utterances" in capsys.readouterr().out


def test_librivox_missing_package(tmp_path):
    with pytest.raises(RuntimeError, match="apt-get install -y pocketsphinx-testdata"):
        build_librivox_manifest(tmp_path / "x.jsonl", source=tmp_path / "absent")


def test_czech_dialogue_dialog_parser(tmp_path):
    script = tmp_path / "dialogs_cs.lua"
    script.write_text(
        'dialogId("vit-m-a", "font_small", "Hi (there), \\"fish\\".")\ndialogStr("Ahoj, \\"rybo\\".")\n\n'
        'dialogId("vit-v-b", "font_big", "Two")\ndialogStr(\n"Dvě  řeky")\n', encoding="utf-8")
    assert transcripts(script) == {"vit-m-a": 'Ahoj, "rybo".', "vit-v-b": "Dvě  řeky"}


@pytest.mark.skipif(not os.path.isdir(GAME_DATA_DIR + "/sound"), reason="apt-get install fillets-ng-data fillets-ng-data-cs")
def test_czech_dialogue_corpus_splits_levels(tmp_path):
    manifests = build_czech_dialogue_corpus(tmp_path)
    rows = {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in manifests.items()}
    assert len(rows["train"]) > 1000 and rows["test"] and rows["val"]
    level = lambda row: row["audio_filepath"].split("/")[-3]  # noqa: E731
    assert not {level(r) for r in rows["train"]} & {level(r) for r in rows["test"]}
    assert any("ř" in r["text"] for r in rows["train"])
