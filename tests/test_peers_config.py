"""The JoeyNMT side-by-side harness (benchmarks/peers/joeynmt_vs_attnlab.py) builds a JoeyNMT config for every
packaged translation config it has a counterpart for, and each holds JoeyNMT's own rules as its config loader and
model builder apply them, checked here without JoeyNMT installed: every size and count a positive integer
(`decode.batch_size = 0`, attnlab's "by device", became JoeyNMT's batch_size 0 and crashed its first validation:
issue 49), heads dividing the hidden size, the sections and keys JoeyNMT 2.3 reads, the special ids distinct."""

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from attnlab.core.config import PACKAGED_CONFIGS
from attnlab.core.errors import AttnlabError
from attnlab.families.base import model_family
from attnlab.families.translation import load_experiment

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("joeynmt_vs_attnlab", ROOT / "benchmarks" / "peers" /
                                               "joeynmt_vs_attnlab.py")
HARNESS = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("joeynmt_vs_attnlab", HARNESS)
_spec.loader.exec_module(HARNESS)

# the keys of JoeyNMT 2.3's config that the harness may write, by section (joeynmt/helpers.py, training.py,
# prediction.py, model.py, data.py, vocabulary.py, tokenizers.py as of 2.3.0)
KNOWN = {
    "": {"name", "joeynmt_version", "use_cuda", "fp16", "normalization", "model_dir", "random_seed", "data",
         "testing", "training", "model"},
    "data": {"train", "dev", "test", "dataset_type", "sample_dev_subset", "src", "trg", "special_symbols"},
    "side": {"lang", "level", "lowercase", "normalize", "max_length", "min_length", "voc_file", "voc_limit",
             "voc_min_freq", "tokenizer_type", "tokenizer_cfg"},
    "testing": {"n_best", "beam_size", "beam_alpha", "batch_size", "batch_type", "max_output_length",
                "min_output_length", "eval_metrics", "sacrebleu_cfg", "load_model", "return_prob",
                "return_attention", "generate_unk", "repetition_penalty", "no_repeat_ngram_size"},
    "training": {"model_dir", "overwrite", "shuffle", "use_cuda", "random_seed", "optimizer", "adam_betas",
                 "learning_rate", "learning_rate_min", "weight_decay", "clip_grad_norm", "clip_grad_val",
                 "label_smoothing", "batch_size", "batch_type", "batch_multiplier", "epochs", "max_updates",
                 "validation_freq", "logging_freq", "early_stopping_metric", "keep_best_ckpts", "print_valid_sents",
                 "eval_metrics", "scheduling", "learning_rate_warmup", "decrease_factor", "patience",
                 "learning_rate_factor", "loss", "load_model", "reset_best_ckpt", "reset_scheduler",
                 "reset_optimizer", "reset_iter_state"},
}


def harness_configs():
    """(name, JoeyNMT config) of every packaged translation config the harness has a counterpart for."""
    out = []
    for path in sorted(PACKAGED_CONFIGS.rglob("*.toml")):
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        if model_family(raw) not in (None, "rnn", "transformer") or "series" in raw:
            continue
        try:
            joey = HARNESS.joeynmt_config(load_experiment(path), Path("/tmp/peers"))
        except (SystemExit, AttnlabError):  # no JoeyNMT counterpart (Luong, no attention), or not a translation config
            continue
        out.append((str(path.relative_to(PACKAGED_CONFIGS).with_suffix("")), joey))
    return out


CONFIGS = harness_configs()


def test_the_harness_has_configs_to_compare():
    names = [n for n, _ in CONFIGS]
    assert "demo" in names and "bible-transformer-small" in names, names


@pytest.mark.parametrize("name,joey", CONFIGS, ids=[n for n, _ in CONFIGS])
def test_each_joeynmt_config_holds_joeynmts_rules(name, joey):
    assert set(joey) <= KNOWN[""], set(joey) - KNOWN[""]
    for section in ("data", "testing", "training"):
        assert set(joey[section]) <= KNOWN[section], (section, set(joey[section]) - KNOWN[section])
    for side in ("src", "trg"):
        assert set(joey["data"][side]) <= KNOWN["side"]
    t, test = joey["training"], joey["testing"]
    for key, value in (("training.batch_size", t["batch_size"]), ("testing.batch_size", test["batch_size"]),
                       ("testing.beam_size", test["beam_size"]), ("training.batch_multiplier", t["batch_multiplier"]),
                       ("training.validation_freq", t["validation_freq"]), ("training.max_updates", t["max_updates"])):
        assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (key, value)
    assert t["batch_type"] in ("token", "sentence") and test["batch_type"] in ("token", "sentence")
    assert 0 < t["learning_rate"] and 0 <= t["label_smoothing"] < 1 and len(t["adam_betas"]) == 2
    model = joey["model"]
    for part in ("encoder", "decoder"):
        block = model[part]
        assert block["type"] in ("transformer", "recurrent") and block["num_layers"] >= 1
        assert block["hidden_size"] > 0 and 0 <= block["dropout"] < 1
        if block["type"] == "transformer":
            assert block["hidden_size"] % block["num_heads"] == 0 and block["ff_size"] > 0
            assert block["embeddings"]["embedding_dim"] == block["hidden_size"]
    ids = joey["data"]["special_symbols"]
    assert len({ids[k] for k in ("unk_id", "pad_id", "bos_id", "eos_id")}) == 4
