"""Config combinations that were accepted silently are refused at load, naming the keys: a batch budget that holds
no sentence, a packed-row length without packing, one embedding shared by two different vocabularies. The
combinations beside them that make sense still load, and an over-budget example is named when training starts."""

import logging

import pytest
import torch

from attnlab.data.batching import Seq2SeqDataset
from attnlab.app.cli import main
from attnlab.core.errors import AttnlabError
from attnlab.families.translation import load_experiment
from attnlab.families.lm import load_lm_config
from attnlab.families.series import load_series_config
from attnlab.training.trainer import TrainConfig, Trainer

from test_cli import one_error_line

TIE_ALL_SEPARATE = ["model.family=transformer", "model.transformer.tie_embeddings=all", "tokenizer.joint=false"]


@pytest.mark.parametrize("overrides, message", [
    (["train.max_tokens=1"], "train.max_tokens = 1 cannot hold any sentence"),
    (["train.pack_length=64"], "train: pack_length = 64 sizes packed rows, but pack = false"),
    (TIE_ALL_SEPARATE, "model.transformer.tie_embeddings = 'all' shares one embedding between source and target "
                       "ids, but tokenizer.joint = false"),
    (["train.pack=true"], "train.pack needs model.family = 'transformer'"),  # the demo is an RNN
    (["train.fused_loss=true"], "train.fused_loss = true needs model.family = 'transformer'"),
])
def test_silent_combinations_are_refused_naming_the_keys(capsys, overrides, message):
    with pytest.raises(AttnlabError, match=message.replace("(", r"\(")):
        load_experiment("demo", overrides)
    argv = ["summary", "demo"] + [a for o in overrides for a in ("--set", o)]
    assert message in one_error_line(capsys, main(argv))


def test_language_model_budget_too():
    with pytest.raises(AttnlabError, match="train.max_tokens = 1 cannot hold any sentence"):
        load_lm_config(None, ["train.max_tokens=1"])


@pytest.mark.parametrize("overrides", [
    ["train.max_tokens=2"], ["model.family=transformer", "train.pack=true", "train.pack_length=64"],
    ["model.family=transformer", "train.pack=true", "train.fused_loss=true"],
    TIE_ALL_SEPARATE[:2], ["model.family=transformer", "model.transformer.tie_embeddings=decoder",
                           "tokenizer.joint=false"],
    ["model.family=rnn", "model.transformer.tie_embeddings=all", "tokenizer.joint=false"],  # the section unused
])
def test_the_combinations_beside_them_load(overrides):
    load_experiment("demo", overrides)


def test_a_series_may_batch_one_window():
    """train.max_tokens counts windows there (each costs 1), so 1 is a batch of one."""
    assert load_series_config("seed-fib-rnn", ["train.max_tokens=1"]).train.max_tokens == 1


def test_examples_over_the_budget_are_named_when_training_starts(tmp_path, caplog):
    data = Seq2SeqDataset([[5] * n for n in (3, 4, 30, 40)], [[6] * 3] * 4)  # costs 4, 5, 31, 41
    model = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        Trainer(model, TrainConfig(max_tokens=20, device="cpu", progress=False), data, data, tmp_path)
    assert "2 of 4 training examples cost more than train.max_tokens (20 tokens)" in caplog.text
    assert "the longest costs 41" in caplog.text
