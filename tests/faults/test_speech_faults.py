"""Speech data faults: every malformed manifest line and every unusable audio file is reported at once,
with its manifest line, before the first batch; WAV of any sample format decodes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer

from lintf.asr.corpora.manifest import MAX_REPORTED, ManifestError, read_manifest
from lintf.asr.data.speech_data import SpeechData
from lintf.asr.model.task import ASRTask
from lintf.asr.features.audio import AudioError, load_audio
from lintf.run.cli import main
from lintf.models.encoder_config import EncoderConfig
from tests.asr.conftest import tone_corpus

soundfile = pytest.importorskip("soundfile")
REPO = Path(__file__).resolve().parents[2]
GOOD = {"audio_filepath": "a.wav", "duration": 1.0, "text": "ab"}
BAD_LINES = [  # (a manifest line, what its report must say)
    (json.dumps({**GOOD, "text": None}), '"text" is null, expected a string (the transcript)'),
    (json.dumps({**GOOD, "duration": -1.5}), '"duration" is -1.5, expected a number of seconds > 0'),
    (json.dumps({**GOOD, "duration": 0}), '"duration" is 0, expected a number of seconds > 0'),
    ('{"audio_filepath": "a.wav", "duration": NaN, "text": "ab"}', '"duration" is NaN, expected a number'),
    (json.dumps({**GOOD, "duration": "abc"}), '"duration" is "abc", expected a number of seconds > 0'),
    (json.dumps({**GOOD, "text": 7, "audio_filepath": ""}), '"audio_filepath" is "", expected a non-empty string'
     ' (a path); "text" is 7, expected a string'),
    ("5", '5 is not an object, expected a JSON object {"audio_filepath": ..., "duration": ..., "text": ...}'),
    ("null", 'null is not an object, expected a JSON object {"audio_filepath": ...'),
    ('["a.wav", 1.0, "ab"]', '["a.wav", 1.0, "ab"] is not an object'),
    ('{"text": "y"}', 'missing "audio_filepath", "duration", expected a JSON object'),
    ("{not json", "not valid JSON (Expecting property name enclosed in double quotes at column 2), expected a JSON"),
    (b"\xff\xfe{}".decode("latin-1"), "not UTF-8 text (byte 0xff at column 1)"),
]


def test_every_malformed_manifest_line_is_named_with_what_is_expected(tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps(GOOD), *(line for line, _ in BAD_LINES), json.dumps(GOOD)]
    path.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    before = path.read_bytes()
    with pytest.raises(ManifestError) as caught:
        read_manifest(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {len(BAD_LINES)} of {len(BAD_LINES) + 2} lines are malformed")
    for number, (_, expected) in enumerate(BAD_LINES, start=2):
        assert f"{path}:{number}: {expected}" in message, (number, message)
    assert len(caught.value.problems) == len(BAD_LINES) and f"{path}:1:" not in message
    assert path.read_bytes() == before  # the manifest is reported, never rewritten


def test_many_bad_lines_list_the_first_and_count_the_rest(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({**GOOD, "duration": -i}) + "\n" for i in range(1, 31)))
    with pytest.raises(ManifestError) as caught:
        read_manifest(path)
    message = str(caught.value)
    assert f"{path}:{MAX_REPORTED}: " in message and f"{path}:{MAX_REPORTED + 1}: " not in message
    assert message.rstrip().endswith(f"... and {30 - MAX_REPORTED} more") and "30 of 30 lines" in message


def test_null_transcript_never_becomes_a_training_label(tmp_path):
    corpus = tone_corpus(tmp_path / "c")
    rows = [json.loads(line) for line in corpus["train"].read_text().splitlines()]
    rows[1]["text"] = None
    corpus["train"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ManifestError, match=r'train.jsonl:2: "text" is null, expected a string'):
        SpeechData(str(corpus["train"])).vocab_size  # noqa: B018


def spoil_lines(corpus: dict[str, Path]) -> list[str]:
    """Lines 2 and 4 of the training manifest made malformed -> what the report must say."""
    lines = corpus["train"].read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "duration": "abc"})
    lines[3] = "5"
    corpus["train"].write_text("\n".join(lines) + "\n")
    return ['train.jsonl:2: "duration" is "abc", expected a number of seconds > 0', "train.jsonl:4: 5 is not an object"]


def spoil_audio(corpus: dict[str, Path]) -> list[str]:
    """Two training files made undecodable -> what the report must say."""
    (corpus["train"].parent / "train-1.wav").write_bytes(b"")
    (corpus["train"].parent / "train-3.wav").write_text("text, not audio\n")
    return ["2 of 6 audio files cannot be used", "train.jsonl:2: ", "train-1.wav: empty file (0 bytes)",
            "train.jsonl:4: ", "train-3.wav: not decodable: Format not recognised (16 bytes)"]


def float_wav_with(path: Path, value: float, at: int = 100, rate: int = 16_000) -> int:
    """A float32 WAV of 0.2 s of tone with ``value`` at sample ``at`` in place of ``path``; its sample count."""
    samples = (0.3 * np.sin(np.arange(rate // 5) * 0.2)).astype(np.float32)
    samples[at] = value
    soundfile.write(path, samples, rate, subtype="FLOAT")
    return len(samples)


def spoil_samples(corpus: dict[str, Path]) -> list[str]:
    """A NaN sample in one training file -> what the report must say."""
    count = float_wav_with(corpus["train"].parent / "train-2.wav", float("nan"))
    return ["1 of 6 audio files cannot be used", "train.jsonl:3: ",
            f"train-2.wav: 1 of {count} samples are not finite (NaN or infinity), the first at sample 100 (0.006 s)"]


@pytest.mark.parametrize("spoil", [spoil_lines, spoil_audio, spoil_samples])
def test_lintf_fit_stops_with_every_bad_line_and_leaves_no_run(tmp_path, monkeypatch, capsys, spoil):
    corpus = tone_corpus(tmp_path / "c")
    expected = spoil(corpus)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as code:
        main(["fit", "--config", str(REPO / "configs" / "asr_synth.yaml"),
              "--data.init_args.train_manifest", str(corpus["train"]), "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Traceback" not in err
    assert all(part in err for part in expected), err
    assert not list(tmp_path.rglob("lightning_logs")) and not list(tmp_path.rglob("*.ckpt"))


def unusable_audio(directory: Path) -> dict[str, str]:
    """Corrupt train-1..train-5 of a tone corpus, each differently -> what the report must say of each."""
    (directory / "train-1.wav").write_bytes(b"")
    (directory / "train-2.wav").write_text("this is a transcript, not audio\n")
    (directory / "train-3.wav").write_bytes(np.random.default_rng(0).integers(0, 256, 4000, np.uint8).tobytes())
    soundfile.write(directory / "train-4.wav", np.zeros(0, np.float32), 16_000, subtype="PCM_16")
    (directory / "train-5.wav").unlink()
    return {"train-1.wav": "empty file (0 bytes)", "train-2.wav": "not decodable: Format not recognised (32 bytes)",
            "train-3.wav": "not decodable: ", "train-4.wav": "no samples (a WAV header without audio data)",
            "train-5.wav": "not found"}


def test_unusable_audio_is_found_before_training_with_every_line(tmp_path):
    corpus = tone_corpus(tmp_path / "c")
    expected = unusable_audio(tmp_path / "c")
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=2)
    with pytest.raises(AudioError) as caught:
        data.setup("fit")
    message = str(caught.value)
    assert message.startswith(f"{corpus['train']}: 5 of 6 audio files cannot be used; each must be audio in a format")
    for line, (name, why) in enumerate(expected.items(), start=2):
        assert f"train.jsonl:{line}: {tmp_path / 'c' / name}: {why}" in message, (name, message)
    assert "train.jsonl:1:" not in message
    with pytest.raises(AudioError):  # still refused on a second look: nothing unchecked was kept
        data.train_dataloader()


def test_setup_checks_the_validation_manifests_too(tmp_path):
    corpus = tone_corpus(tmp_path / "c")
    (tmp_path / "c" / "val-3.wav").write_bytes(b"RIFF0000WAVEjunk")
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]))
    with pytest.raises(AudioError, match=r"val.jsonl:4: .*val-3.wav: not decodable: Error in WAV file"):
        data.setup("fit")
    data.setup("test")  # the test manifest is fine


def test_the_check_reads_headers_only(tmp_path, monkeypatch):
    corpus = tone_corpus(tmp_path / "c", n=12)

    def no_decoding(*args, **kwargs):
        raise AssertionError("the manifest check decoded samples; it must read headers only")

    monkeypatch.setattr(soundfile, "read", no_decoding)
    assert len(SpeechData(str(corpus["train"])).split_entries("train")) == 12


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_sample_is_found_before_training_and_refused_when_decoded(tmp_path, value):
    corpus = tone_corpus(tmp_path / "c")
    wav = tmp_path / "c" / "train-4.wav"
    count = float_wav_with(wav, value, at=1600)
    why = f"1 of {count} samples are not finite (NaN or infinity), the first at sample 1600 (0.100 s)"
    data = SpeechData(str(corpus["train"]), batch_size=6)
    with pytest.raises(AudioError) as caught:
        data.setup("fit")
    assert f"train.jsonl:5: {wav}: {why}; audio samples must be finite numbers" in str(caught.value)
    assert "train.jsonl:4:" not in str(caught.value) and "train.jsonl:6:" not in str(caught.value)
    with pytest.raises(AudioError, match=re.escape(f"audio file {wav}: {why}")):
        load_audio(wav)
    checked = tone_corpus(tmp_path / "d")
    data = SpeechData(str(checked["train"]), batch_size=6, spec_augment=False)
    data.setup("fit")
    float_wav_with(tmp_path / "d" / "train-4.wav", value, at=1600)  # spoiled after the check: refused when decoded
    with pytest.raises(AudioError, match=re.escape(f"train.jsonl:5: audio file {tmp_path / 'd' / 'train-4.wav'}: ")):
        next(iter(data.train_dataloader()))


def test_float_wav_with_finite_samples_passes_the_check(tmp_path):
    corpus = tone_corpus(tmp_path / "c")
    float_wav_with(tmp_path / "c" / "train-4.wav", 0.5)
    rows = [json.loads(line) for line in corpus["train"].read_text().splitlines()]
    rows[4]["duration"] = 0.2  # the replacement's length, so only its samples are judged
    corpus["train"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert len(SpeechData(str(corpus["train"])).split_entries("train")) == 6


@pytest.mark.slow
def test_checking_8000_utterances_takes_seconds(tmp_path, capsys):
    wav = tmp_path / "one.wav"
    soundfile.write(wav, np.full(1600, 0.1, np.float32), 16_000, subtype="PCM_16")
    payload = wav.read_bytes()
    rows = []
    for i in range(8000):
        (tmp_path / f"{i}.wav").write_bytes(payload)
        rows.append(json.dumps({"audio_filepath": f"{i}.wav", "duration": 0.1, "text": "ab"}) + "\n")
    (tmp_path / "m.jsonl").write_text("".join(rows))
    start = time.perf_counter()
    entries = SpeechData(str(tmp_path / "m.jsonl")).split_entries("train")
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\nchecked 8000 manifest lines and audio headers in {seconds:.2f} s")
    assert len(entries) == 8000 and seconds < 20


@pytest.mark.parametrize("subtype,tolerance", [("PCM_16", 1 / 32768), ("PCM_24", 1 / 2**23), ("FLOAT", 0.0),
                                               ("PCM_U8", 1 / 128)])
def test_wav_of_every_sample_format_decodes(tmp_path, subtype, tolerance):
    samples = np.sin(np.linspace(0, 40, 8000)).astype(np.float32) * 0.8
    soundfile.write(tmp_path / "a.wav", samples, 8000, subtype=subtype)
    waveform, rate = load_audio(tmp_path / "a.wav")
    assert rate == 8000 and waveform.dtype == torch.float32 and waveform.shape == (8000,)
    assert np.abs(waveform.numpy() - samples).max() <= tolerance


@pytest.mark.parametrize("content,why", [
    (b"", "empty file (0 bytes)"),
    (b"hello, I am text\n" * 3, "not decodable: Format not recognised (51 bytes)"),
    (b"RIFF0000WAVEjunk", "not decodable: Error in WAV file. No 'data' chunk marker (16 bytes)"),
])
def test_undecodable_files_say_why_and_what_is_expected(tmp_path, content, why):
    (tmp_path / "bad.wav").write_bytes(content)
    with pytest.raises(AudioError) as caught:
        load_audio(tmp_path / "bad.wav")
    assert str(caught.value) == (f"audio file {tmp_path / 'bad.wav'}: {why}; expected audio in a format libsndfile "
                                 "decodes (WAV, FLAC, OGG/Vorbis, MP3, ...) with at least one sample")


def test_a_model_for_other_log_mel_bins_is_refused_before_training(tmp_path):
    corpus = tone_corpus(tmp_path / "c")
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), batch_size=3, n_mels=40)
    task = ASRTask(data.vocab_size, data.max_length, EncoderConfig(d_model=16, n_layers=1, n_heads=2), conv_channels=4)
    before = {name: value.clone() for name, value in task.state_dict().items()}
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ValueError) as caught:
        trainer.fit(task, datamodule=data)
    assert str(caught.value).startswith("the data's features have n_mels=40 log-mel bins, but the model reads "
                                        "n_mels=80 ")
    assert "--data.init_args.n_mels 80 " in str(caught.value) and "--model.init_args.n_mels 40 " in str(caught.value)
    assert trainer.global_step == 0 and all(torch.equal(before[k], v) for k, v in task.state_dict().items())


def test_lintf_fit_with_other_n_mels_for_model_and_data_is_one_paragraph(tmp_path, monkeypatch, capsys):
    corpus = tone_corpus(tmp_path / "c")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as code:
        main(["fit", "--config", str(REPO / "configs" / "asr_synth.yaml"), "--data.init_args.train_manifest",
              str(corpus["train"]), "--data.init_args.val_manifest", str(corpus["val"]), "--data.init_args.dev_manifest",
              "null", "--data.init_args.n_mels", "40", "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Traceback" not in err
    assert "the data's features have n_mels=40 log-mel bins, but the model reads n_mels=80" in err, err
    assert not list(tmp_path.rglob("*.ckpt"))


def test_lintf_test_of_a_checkpoint_for_other_log_mel_bins_is_one_paragraph(tmp_path, monkeypatch, capsys):
    corpus = tone_corpus(tmp_path / "c")
    monkeypatch.chdir(tmp_path)
    data = ["--data.init_args.train_manifest", str(corpus["train"]), "--data.init_args.val_manifest", str(corpus["val"]),
            "--data.init_args.test_manifest", str(corpus["test"]), "--data.init_args.dev_manifest", "null",
            "--data.init_args.num_workers", "0"]
    main(["fit", "--config", str(REPO / "configs" / "asr_synth.yaml"), *data, "--data.init_args.n_mels", "40",
          "--model.init_args.n_mels", "40", "--model.init_args.encoder.d_model", "16", "--model.init_args.encoder."
          "n_layers", "1", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path)])
    (ckpt,) = tmp_path.rglob("last.ckpt")
    capsys.readouterr()
    with pytest.raises(SystemExit) as code:  # the model of the checkpoint reads 40 bins, the config's data has 80
        main(["test", "--config", str(REPO / "configs" / "asr_synth.yaml"), *data, "--decoding.lm_order", "0",
              "--ckpt_path", str(ckpt), "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Traceback" not in err
    assert "the data's features have n_mels=80 log-mel bins, but the model reads n_mels=40" in err, err
    assert "--data.init_args.n_mels 40 to read this model's features" in err
