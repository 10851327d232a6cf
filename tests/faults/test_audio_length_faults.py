"""Audio files cut short: a WAV holding fewer frames than its header declares, or far less audio than its
manifest line's duration, is reported with its line before training, exit status 2, no run left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lintf.run.cli import main
from tests.asr.conftest import tone_corpus

soundfile = pytest.importorskip("soundfile")
REPO = Path(__file__).resolve().parents[2]


def test_cut_audio_is_named_with_its_manifest_line(tmp_path, monkeypatch, capsys):
    corpus = tone_corpus(tmp_path / "c")
    directory = corpus["train"].parent
    rows = [json.loads(line) for line in corpus["train"].read_text().splitlines()]
    whole = (directory / "train-2.wav").read_bytes()
    (directory / "train-2.wav").write_bytes(whole[: len(whole) // 3])  # a copy that stopped at a third
    info = soundfile.info(str(directory / "train-2.wav"))
    declared = int(rows[2]["duration"] * 16_000)  # tone_corpus writes duration * rate samples
    short, rate = soundfile.read(str(directory / "train-4.wav"))  # next: a whole file, a third of its listed audio
    soundfile.write(str(directory / "train-4.wav"), short[: len(short) // 3], rate, subtype="PCM_16")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as code:
        main(["fit", "--config", str(REPO / "configs" / "asr_synth.yaml"),
              "--data.init_args.train_manifest", str(corpus["train"]), "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Traceback" not in err
    assert "2 of 6 audio files cannot be used" in err
    assert (f"train.jsonl:3: {directory / 'train-2.wav'}: truncated: {info.frames} of the {declared} frames its "
            "header declares") in err
    assert (f"train.jsonl:5: {directory / 'train-4.wav'}: holds {len(short) // 3 / rate:.2f} s of audio, but the "
            f"manifest's duration is {rows[4]['duration']:g} s") in err
    assert not list(tmp_path.rglob("lightning_logs")) and not list(tmp_path.rglob("*.ckpt"))
