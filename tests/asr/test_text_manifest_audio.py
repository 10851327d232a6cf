"""Transcript normalisation, the character vocabulary, manifests and audio decoding."""

import json

import numpy as np
import pytest
import torch

from lintf.asr.features.audio import AudioError, load_audio, write_wav
from lintf.asr.corpora.manifest import read_manifest, write_manifest
from lintf.asr.text import CharVocabulary, normalize_text


def test_normalize_text():
    assert normalize_text("And God said, Let there be light: and there was light.") == (
        "and god said let there be light and there was light")
    assert normalize_text("  Café — don’t  STOP!") == "cafe don't stop"
    assert normalize_text("Dvě  Řeky, (snake_case)!", keep_accents=True) == "dvě řeky snake case"


def test_vocabulary_round_trip_and_errors():
    vocabulary = CharVocabulary.from_texts(["ab c", "cab"])
    assert vocabulary.characters == " abc" and len(vocabulary) == 5
    assert vocabulary.encode("cab") == [4, 2, 3]
    assert vocabulary.decode([0, 4, 2, 0, 3]) == "cab"
    with pytest.raises(KeyError, match=r"\['z'\]"):
        vocabulary.encode("zab")
    with pytest.raises(ValueError, match="distinct"):
        CharVocabulary("aa")


def test_manifest_round_trip_and_relative_paths(tmp_path):
    rows = [{"audio_filepath": "a.wav", "duration": 1.5, "text": "hi"}, {"audio_filepath": "/x/b.flac", "duration": 2, "text": "yo"}]
    write_manifest(tmp_path / "m.jsonl", rows)
    entries = read_manifest(tmp_path / "m.jsonl")
    assert entries[0].audio_filepath == tmp_path / "a.wav" and str(entries[1].audio_filepath) == "/x/b.flac"
    assert entries[1].where == f"{tmp_path / 'm.jsonl'}:2"


def test_manifest_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"audio_filepath": "a.wav", "duration": 1, "text": "x"}) + "\n" + '{"text": "y"}\n')
    with pytest.raises(ValueError, match=r'bad.jsonl:2: missing "audio_filepath", "duration"'):
        read_manifest(path)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not valid JSON"):
        read_manifest(path)


def test_wav_round_trip(tmp_path):
    x = torch.linspace(-0.9, 0.9, 1000)
    write_wav(tmp_path / "a.wav", x, 8000)
    y, rate = load_audio(tmp_path / "a.wav")
    assert rate == 8000 and y.dtype == torch.float32
    torch.testing.assert_close(y, x, atol=1 / 32768, rtol=0)


@pytest.mark.parametrize("suffix", [".flac", ".ogg"])
def test_compressed_formats_via_soundfile(tmp_path, suffix):
    soundfile = pytest.importorskip("soundfile")
    t = np.arange(16000) / 16000
    stereo = np.stack([np.sin(2 * np.pi * 300 * t), np.sin(2 * np.pi * 300 * t)], axis=1) * 0.5
    soundfile.write(tmp_path / f"a{suffix}", stereo, 16000)
    y, rate = load_audio(tmp_path / f"a{suffix}")
    assert rate == 16000 and y.shape == (16000,)
    assert np.abs(y.numpy() - stereo[:, 0]).max() < (1e-3 if suffix == ".flac" else 0.1)


def test_missing_and_corrupt_audio(tmp_path):
    with pytest.raises(AudioError, match="not found"):
        load_audio(tmp_path / "nope.wav")
    (tmp_path / "bad.wav").write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(AudioError, match="bad.wav: not decodable"):
        load_audio(tmp_path / "bad.wav")
