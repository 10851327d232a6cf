"""StreamLanguageModelTask: a carried state makes segment after segment equal the unsplit stream; reset does not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.data.tokenizers import tokenizer_from_checkpoint
from lintf.models import EncoderConfig
from lintf.ops import LinearAttentionState
from lintf.tasks import CopyTask, StreamLanguageModelTask
from lintf.tasks.stream_lm import detach_state

ENCODER = EncoderConfig(d_model=16, n_layers=2, n_heads=2, dropout=0.0)
HYBRID = EncoderConfig(d_model=16, n_layers=2, n_heads=2, dropout=0.0, attention=["gated_delta_net", "local"],
                       attention_kwargs={"local": {"window": 3}}, layer=["recipe", "projections"])


def losses_of_second_segment(
    between_segments: str, encoder: EncoderConfig = ENCODER
) -> tuple[float, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    task = StreamLanguageModelTask(vocab_size=7, max_length=32, encoder=encoder, between_segments=between_segments)
    task.double()
    stream = torch.randint(0, 7, (3, 17))  # 3 streams, two segments of 8 (+1 next character)
    task.training_step({"tokens": stream[:, :9], "first": True}, 0)
    second = float(task.training_step({"tokens": stream[:, 8:], "first": False}, 1))
    with torch.no_grad():
        logits = task(stream[:, :-1])  # the whole stream in one pass
    whole = F.cross_entropy(logits[:, 8:].flatten(0, 1), stream[:, 9:].flatten())
    alone = F.cross_entropy(task(stream[:, 8:-1]).detach().flatten(0, 1), stream[:, 9:].flatten())
    return second, whole, alone


@pytest.mark.parametrize("encoder", [ENCODER, HYBRID], ids=["linear", "hybrid"])
def test_carried_state_continues_the_stream_exactly(encoder):
    second, whole, alone = losses_of_second_segment("carry", encoder)
    assert second == pytest.approx(float(whole), rel=1e-6)  # the task's loss is computed in fp32
    assert abs(second - float(alone)) > 1e-3  # the first segment mattered


def test_reset_starts_every_segment_afresh():
    second, whole, alone = losses_of_second_segment("reset")
    assert second == pytest.approx(float(alone), rel=1e-6)
    assert abs(second - float(whole)) > 1e-3


def test_the_first_segment_of_an_epoch_resets_and_states_are_detached():
    task = StreamLanguageModelTask(vocab_size=7, max_length=32, encoder=ENCODER)
    tokens = torch.randint(0, 7, (2, 9))
    task.training_step({"tokens": tokens, "first": True}, 0)
    assert task.stream_state is not None
    leaves = [t for layer in task.stream_state for t in layer if isinstance(t, torch.Tensor)]
    assert leaves and all(not t.requires_grad for t in leaves)
    carried = (LinearAttentionState(torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)),)
    detached = detach_state(carried)
    assert type(detached[0]) is LinearAttentionState and detached[0].kv.requires_grad is False


def test_tasks_refuse_attentions_without_a_causal_form():
    with pytest.raises(ValueError, match="its attention must be causal; 'clustered' is not"):
        CopyTask(12, 24, EncoderConfig(d_model=16, n_layers=1, n_heads=2, attention="clustered"))


# each shipped stream config with its depth shrunk (the hybrids keep their 4-layer pattern)
STREAM_CONFIGS = {"stream_lm.yaml": "1", "stream_lm_hybrid.yaml": "4", "stream_lm_packed.yaml": "4"}


@pytest.mark.parametrize("config_name", sorted(STREAM_CONFIGS))
def test_config_trains_and_tests_on_a_text_file(config_name, tmp_path, monkeypatch):
    from tests.cli.helpers import REPO, quiet_trainer, run

    assert sorted(p.name for p in (REPO / "configs").glob("stream_lm*.yaml")) == sorted(STREAM_CONFIGS)
    monkeypatch.chdir(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("in the beginning was the word, and the word was with god.\n" * 200)
    config = ["--config", str(REPO / "configs" / config_name), "--data.init_args.path", str(text),
              "--data.init_args.eval_length", "64", "--data.init_args.batch_size", "4",
              "--model.init_args.encoder.d_model", "16",
              "--model.init_args.encoder.n_layers", STREAM_CONFIGS[config_name],
              "--model.init_args.encoder.n_heads", "2", *quiet_trainer(tmp_path)]
    fitted = run(["fit", *config, "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
                  "--model.init_args.lr_scheduler.init_args.total_steps", "40"])
    assert fitted.trainer.global_step == 3 and "val/bits_per_char" in fitted.trainer.callback_metrics
    checkpoint = torch.load(fitted.trainer.checkpoint_callback.last_model_path, weights_only=True)
    tokenizer = tokenizer_from_checkpoint(checkpoint)  # the checkpoint reads text without the data
    assert tokenizer.decode(tokenizer.encode("the word was god")) == "the word was god"
    characters = set(text.read_text())
    if "packed" in config_name:  # documents are the lines, without the separator "\n" between them
        characters.discard("\n")
    assert tokenizer.vocab_size == len(characters) == fitted.model.hparams.vocab_size
    tested = run(["test", *config, "--ckpt_path", "last"])
    assert 0 < float(tested.trainer.callback_metrics["test/bits_per_char"]) < 8


@pytest.mark.parametrize("attention", ["softmax", "topk"])
def test_carry_refuses_an_attention_whose_cache_grows_with_every_segment(attention):
    encoder = EncoderConfig(d_model=8, n_layers=1, n_heads=2, attention=attention, dropout=0.0)
    with pytest.raises(ValueError, match=rf"attention '{attention}'.*grow with every segment.*between_segments reset"):
        StreamLanguageModelTask(vocab_size=11, max_length=16, encoder=encoder, between_segments="carry")
    StreamLanguageModelTask(vocab_size=11, max_length=16, encoder=encoder, between_segments="reset")
    for fixed_size in ("linear", "local"):
        StreamLanguageModelTask(vocab_size=11, max_length=16, between_segments="carry",
                                encoder=EncoderConfig(d_model=8, n_layers=1, n_heads=2, attention=fixed_size))
