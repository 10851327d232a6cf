"""SpeechData: manifests -> padded, length-bucketed batches; errors name the manifest line."""

import json

import pytest
import torch

from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.data.batches import BucketBatchSampler
from lintf.asr.features.audio import AudioError, load_audio
from lintf.asr.features.log_mel import LogMel, normalize_utterance
from lintf.asr.model.frontend import subsampled_lengths


def make(corpus, **overrides):
    arguments = {"train_manifest": str(corpus["train"]), "val_manifest": str(corpus["val"]),
                 "test_manifest": str(corpus["test"]), "batch_size": 4, **overrides}
    return SpeechData(**arguments)


def test_batches_are_padded_with_lengths(corpus):
    data = make(corpus, spec_augment=False)
    assert data.vocabulary.characters == " abcde" and data.vocab_size == 7
    batches = list(data.val_dataloader())
    assert sum(len(b["text"]) for b in batches) == 6
    batch = batches[0]
    features, lengths = batch["features"], batch["feature_lengths"]
    assert features.shape[0] == 4 and features.shape[2] == 80 and features.shape[1] == int(lengths.max())
    for i, n in enumerate(lengths.tolist()):
        assert (features[i, n:] == 0).all()
        assert data.vocabulary.decode(batch["targets"][i, : batch["target_lengths"][i]].tolist()) == batch["text"][i]
    assert lengths.tolist() == sorted(lengths.tolist())  # bucketed by duration


def test_max_length_matches_subsampling(corpus):
    data = make(corpus, max_duration=2.0)
    assert data.max_length == int(subsampled_lengths(torch.tensor(LogMel().frames(32_000))))


def test_hop_sets_the_frame_rate(corpus):
    coarse, fine = make(corpus, spec_augment=False), make(corpus, spec_augment=False, hop_ms=5.0)
    coarse_frames = next(iter(coarse.val_dataloader()))["feature_lengths"]
    fine_frames = next(iter(fine.val_dataloader()))["feature_lengths"]
    samples = torch.tensor([int((0.3 + 0.1 * len(t)) * 16_000) for t in next(iter(coarse.val_dataloader()))["text"]])
    assert torch.equal(coarse_frames, samples // 160 + 1)  # one frame per 10 ms, centred frames
    assert torch.equal(fine_frames, samples // 80 + 1)
    assert fine.max_length == int(subsampled_lengths(torch.tensor(LogMel(hop_ms=5.0).frames(20 * 16_000))))
    with pytest.raises(ValueError, match="1 <= hop_ms <= 25"):
        make(corpus, hop_ms=30.0)


DURATIONS = [5, 1, 4, 2, 3, 9, 7]


def test_bucket_sampler_covers_everything_once_and_reshuffles():
    sampler = BucketBatchSampler(range(7), batch_size=3, durations=DURATIONS, shuffle=True, seed=1)
    first, second = list(sampler), list(sampler)
    assert len(sampler) == len(first) == 3
    assert sorted(i for b in first for i in b) == list(range(7))
    assert sorted(map(sorted, first)) == sorted(map(sorted, second))
    assert [1, 3, 4] in [sorted(b) for b in first]  # the three shortest share a batch
    assert [[1, 3, 4], [0, 2, 6]] == [sorted(b) for b in BucketBatchSampler(range(7), 3, True, DURATIONS)]


def test_bucket_sampler_takes_a_distributed_shard_from_lightning():
    # Lightning re-creates the batch sampler around a DistributedSampler under DDP, as here for two ranks.
    dataset = list(range(7))
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = DataLoader(dataset, batch_sampler=BucketBatchSampler(
            RandomSampler(dataset), 2, durations=DURATIONS, shuffle=True))
    shards = [_update_dataloader(loader, DistributedSampler(dataset, num_replicas=2, rank=rank, seed=3),
                                 mode=RunningStage.TRAINING) for rank in (0, 1)]
    batches = [list(shard.batch_sampler) for shard in shards]
    assert all(isinstance(shard.batch_sampler, BucketBatchSampler) for shard in shards)
    assert len(batches[0]) == len(batches[1]) == 2  # equal batch counts, or DDP would hang
    seen = [i for rank in batches for batch in rank for i in batch]
    assert set(seen) == set(range(7)) and len(seen) == 8  # the distributed sampler pads 7 to 2 x 4
    for rank in batches:
        for batch in rank:  # still bucketed: each batch holds neighbours in the shard's duration order
            assert all(DURATIONS[i] <= DURATIONS[j] for i, j in zip(batch, batch[1:]))


def test_spec_augment_masks_training_features_only(corpus):
    torch.manual_seed(0)
    data = make(corpus, freq_masks=2, freq_width=20, time_masks=0)
    train = data.dataset("train")[0]["features"]
    val = data.dataset("val")[0]["features"]
    assert (train == 0).all(dim=0).any() and not (val == 0).all(dim=0).any()


def test_missing_audio_names_the_manifest_line(corpus):
    (corpus["val"].parent / "val-2.wav").unlink()
    with pytest.raises(AudioError, match=r"val.jsonl:3"):
        make(corpus).val_dataloader()


def test_corrupt_audio_names_the_manifest_line(corpus):
    (corpus["test"].parent / "test-1.wav").write_bytes(b"garbage")
    with pytest.raises(AudioError, match=r"test.jsonl:2: .*test-1.wav: not decodable"):
        make(corpus).dataset("test")


def test_audio_spoiled_after_the_check_names_the_manifest_line(corpus):
    dataset = make(corpus).dataset("test")
    (corpus["test"].parent / "test-1.wav").write_bytes(b"garbage")  # replaced while the run goes on
    with pytest.raises(AudioError, match=r"test.jsonl:2: audio file .*test-1.wav: not decodable"):
        dataset[1]


def test_unknown_characters_name_the_line(corpus):
    lines = corpus["val"].read_text().splitlines()
    row = json.loads(lines[0])
    row["text"] = "zebra"
    corpus["val"].write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"val.jsonl:1: characters \['r', 'z'\]"):
        make(corpus).val_dataloader()


def test_argument_errors(corpus):
    with pytest.raises(ValueError, match="train_manifest or vocabulary"):
        SpeechData()
    with pytest.raises(ValueError, match="missing.jsonl does not exist; build a corpus with `lintf data synth-speech"):
        SpeechData(str(corpus["train"].parent / "missing.jsonl")).vocab_size
    with pytest.raises(ValueError, match="no predict_manifest"):
        SpeechData(vocabulary="ab").predict_dataloader()


def test_vtlp_warps_training_features_only(corpus):
    plain, warped = make(corpus, spec_augment=False), make(corpus, spec_augment=False, vtlp=0.2)
    for split, differs in (("train", True), ("val", False)):
        a, b = plain.dataset(split)[0]["features"], warped.dataset(split)[0]["features"]
        assert a.shape == b.shape and (not torch.equal(a, b)) == differs
    with pytest.raises(ValueError, match=r"vtlp must be in \[0, 0.3\]"):
        make(corpus, vtlp=0.5)


def test_test_warp_warps_test_and_predict_features_by_exactly_that_factor(corpus):
    plain, warped = make(corpus, spec_augment=False), make(corpus, spec_augment=False, test_warp=1.15)
    for split in ("train", "val", "test", "predict"):
        a, b = plain.dataset(split)[0]["features"], warped.dataset(split)[0]["features"]
        assert torch.equal(a, b) == (split in ("train", "val"))
    waveform, _ = load_audio(warped.dataset("test").entries[0].audio_filepath)  # the corpus is 16 kHz already
    expected = normalize_utterance(LogMel(16_000, 80)(waveform, 1.15))
    torch.testing.assert_close(warped.dataset("test")[0]["features"], expected)
    with pytest.raises(ValueError, match=r"test_warp must be in \[0.7, 1.3\]"):
        make(corpus, test_warp=1.5)


def test_speed_perturbation_changes_training_durations_only(corpus):
    torch.manual_seed(0)
    plain, sped = make(corpus, spec_augment=False), make(corpus, spec_augment=False, speed_perturb=0.2)
    train_frames = [(plain.dataset("train")[i]["features"].shape[0], sped.dataset("train")[i]["features"].shape[0])
                    for i in range(4)]
    assert all(abs(b - a) <= 0.21 * a + 1 for a, b in train_frames) and any(a != b for a, b in train_frames)
    assert torch.equal(plain.dataset("val")[0]["features"], sped.dataset("val")[0]["features"])
    with pytest.raises(ValueError, match=r"speed_perturb must be in \[0, 0.3\]"):
        make(corpus, speed_perturb=0.4)
