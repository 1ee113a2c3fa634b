"""The JoeyNMT side-by-side harness (benchmarks/peers/joeynmt_vs_attnlab.py, joeynmt_settings.py) builds a JoeyNMT
config for every packaged translation config it has a counterpart for, checked here without JoeyNMT installed:
- JoeyNMT's own rules, as its config loader and model builder apply them: every size and count a positive integer
  (`decode.batch_size = 0`, attnlab's "by device", became JoeyNMT's batch_size 0 and crashed its first validation:
  issue 49), heads dividing the hidden size, the sections and keys JoeyNMT 2.3 reads (`normalization` in the
  training section and `updates`: the harness wrote them where 2.3 does not look, so JoeyNMT normalized by
  sentences and ignored the update limit), the special ids distinct, logging_freq dividing validation_freq.
- A fair peer (issue 49): every setting is the one of JoeyNMT's example config for the same kind of model
  (`EXAMPLE` below, written out from joeynmt/joeynmt with each source file named), unless the harness lists the
  setting among its documented departures; and what must match for a fair comparison does (attnlab's dimensions,
  token budget and test beam).
- The dev BLEU curves the harness records, parsed from JoeyNMT's validations.txt and log and attnlab's metrics."""

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
SETTINGS = sys.modules["joeynmt_settings"]  # imported by the harness from benchmarks/peers/

# the keys of JoeyNMT 2.3's config that the harness may write, by section (joeynmt/config.py, training.py,
# prediction.py, model.py, initialization.py, encoders.py, decoders.py, embeddings.py, data.py, tokenizers.py as of
# 2.3.0). A key JoeyNMT does not read is silently ignored, so it is an error here.
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
                 "label_smoothing", "normalization", "batch_size", "batch_type", "batch_multiplier", "epochs",
                 "updates", "validation_freq", "logging_freq", "early_stopping_metric", "keep_best_ckpts",
                 "print_valid_sents", "scheduling", "learning_rate_warmup", "decrease_factor", "patience",
                 "learning_rate_factor", "loss", "load_model", "reset_best_ckpt", "reset_scheduler",
                 "reset_optimizer", "reset_iter_state"},
    "model": {"initializer", "init_gain", "init_weight", "embed_initializer", "embed_init_weight",
              "embed_init_gain", "bias_initializer", "bias_init_weight", "init_rnn_orthogonal", "lstm_forget_gate",
              "tied_embeddings", "tied_softmax", "encoder", "decoder"},
    "block": {"type", "rnn_type", "embeddings", "hidden_size", "bidirectional", "num_layers", "dropout", "freeze",
              "hidden_dropout", "init_hidden", "input_feeding", "attention", "activation", "num_heads", "ff_size",
              "layer_norm", "alpha"},
    "embeddings": {"embedding_dim", "scale", "dropout", "freeze", "load_pretrained"},
}

# JoeyNMT's own example configs (https://github.com/joeynmt/joeynmt, configs/), setting by setting; None: not set.
RNN = "configs/iwslt14_deen_bpe.yaml"  # JoeyNMT's RNN benchmark: bi-GRU, GRU decoder, Bahdanau attention
RNN_INIT = "configs/rnn_small.yaml"  # the 2.x GRU + Bahdanau example, which spells out the initializers
TRANSFORMER = "configs/transformer_iwslt14_deen_bpe.yaml"  # its Transformer benchmark: 256 wide, 4 heads, ff 1024
TRANSFORMER_2X = "configs/iwslt14_deen_sp.yaml"  # the 2.x Transformer example: layer_norm and activation
EXAMPLE = {
    "rnn": {
        "training.optimizer": "adam",  # RNN
        "training.adam_betas": [0.9, 0.999],  # RNN_INIT (RNN: unset, the same default)
        "training.learning_rate": 0.0002,  # RNN
        "training.scheduling": "plateau",  # RNN
        "training.patience": 8,  # RNN
        "training.decrease_factor": 0.7,  # RNN
        "training.learning_rate_warmup": None,  # RNN
        "training.weight_decay": 0.0,  # RNN
        "training.clip_grad_norm": None,  # RNN ("#clip_grad_norm: 1.0", commented out)
        "training.clip_grad_val": None,  # RNN
        "training.label_smoothing": 0.0,  # RNN (unset: off)
        "training.normalization": "tokens",  # RNN
        "training.batch_size": 80,  # RNN (sentences)
        "training.batch_type": "sentence",  # RNN (unset: JoeyNMT 1.x's sentence batches)
        "training.early_stopping_metric": "loss",  # RNN
        "training.validation_freq": 2000,  # RNN
        "training.logging_freq": 500,  # RNN
        "testing.eval_metrics": ["bleu"],  # RNN (eval_metric: "bleu")
        "testing.beam_size": 5,  # RNN
        "testing.beam_alpha": 1.0,  # RNN (alpha)
        "testing.max_output_length": 80,  # RNN
        "data.src.max_length": 62,  # RNN (max_sent_length)
        "data.trg.max_length": 62,  # RNN (max_sent_length)
        "model.initializer": "xavier_uniform",  # RNN_INIT
        "model.init_gain": 1.0,  # RNN_INIT
        "model.embed_initializer": "normal",  # RNN_INIT
        "model.embed_init_weight": 0.1,  # RNN_INIT
        "model.bias_initializer": "zeros",  # RNN_INIT
        "model.init_rnn_orthogonal": False,  # RNN_INIT
        "model.lstm_forget_gate": 1.0,  # RNN_INIT
        "model.tied_embeddings": False,  # RNN (unset)
        "model.tied_softmax": False,  # RNN (unset)
        "model.encoder.rnn_type": "gru",  # RNN
        "model.encoder.embeddings.embedding_dim": 620,  # RNN
        "model.encoder.embeddings.scale": False,  # RNN
        "model.encoder.hidden_size": 500,  # RNN
        "model.encoder.bidirectional": True,  # RNN
        "model.encoder.num_layers": 1,  # RNN
        "model.encoder.dropout": 0.0,  # RNN
        "model.decoder.rnn_type": "gru",  # RNN
        "model.decoder.embeddings.embedding_dim": 620,  # RNN
        "model.decoder.embeddings.scale": False,  # RNN
        "model.decoder.hidden_size": 1000,  # RNN
        "model.decoder.num_layers": 1,  # RNN
        "model.decoder.dropout": 0.0,  # RNN
        "model.decoder.hidden_dropout": 0.2,  # RNN
        "model.decoder.input_feeding": True,  # RNN
        "model.decoder.init_hidden": "bridge",  # RNN
        "model.decoder.attention": "bahdanau",  # RNN
    },
    "transformer": {
        "training.optimizer": "adam",  # TRANSFORMER
        "training.adam_betas": [0.9, 0.999],  # TRANSFORMER
        "training.learning_rate": 0.0003,  # TRANSFORMER
        "training.learning_rate_min": 1.0e-8,  # TRANSFORMER
        "training.scheduling": "plateau",  # TRANSFORMER
        "training.patience": 5,  # TRANSFORMER
        "training.decrease_factor": 0.7,  # TRANSFORMER
        "training.learning_rate_warmup": None,  # TRANSFORMER
        "training.weight_decay": 0.0,  # TRANSFORMER
        "training.clip_grad_norm": None,  # TRANSFORMER
        "training.clip_grad_val": None,  # TRANSFORMER
        "training.label_smoothing": 0.1,  # TRANSFORMER
        "training.normalization": "tokens",  # TRANSFORMER
        "training.batch_size": 4096,  # TRANSFORMER (tokens)
        "training.batch_type": "token",  # TRANSFORMER
        "training.early_stopping_metric": "bleu",  # TRANSFORMER (eval_metric, which is bleu)
        "training.validation_freq": 1000,  # TRANSFORMER
        "training.logging_freq": 100,  # TRANSFORMER
        "testing.eval_metrics": ["bleu"],  # TRANSFORMER (eval_metric: "bleu")
        "testing.beam_size": 5,  # TRANSFORMER
        "testing.beam_alpha": 1.0,  # TRANSFORMER (alpha)
        "testing.max_output_length": 100,  # TRANSFORMER
        "data.src.max_length": 62,  # TRANSFORMER (max_sent_length)
        "data.trg.max_length": 62,  # TRANSFORMER (max_sent_length)
        "model.initializer": "xavier_uniform",  # TRANSFORMER ("xavier", 1.x's name for it)
        "model.init_gain": 1.0,  # TRANSFORMER
        "model.embed_initializer": "xavier_uniform",  # TRANSFORMER ("xavier")
        "model.embed_init_gain": 1.0,  # TRANSFORMER
        "model.bias_initializer": "zeros",  # TRANSFORMER
        "model.tied_embeddings": True,  # TRANSFORMER
        "model.tied_softmax": True,  # TRANSFORMER
        **{f"model.{part}.{key}": value for part in ("encoder", "decoder") for key, value in {
            "num_layers": 6, "num_heads": 4, "hidden_size": 256, "ff_size": 1024, "dropout": 0.3,  # TRANSFORMER
            "embeddings.embedding_dim": 256, "embeddings.scale": True, "embeddings.dropout": 0.0,  # TRANSFORMER
            "layer_norm": "pre", "activation": "relu",  # TRANSFORMER_2X
        }.items()},
    },
}


def setting(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def kind_of(joey: dict) -> str:
    return "transformer" if joey["model"]["encoder"]["type"] == "transformer" else "rnn"


def harness_configs():
    """(name, attnlab config, JoeyNMT config) of every packaged translation config the harness has a counterpart
    for."""
    out = []
    for path in sorted(PACKAGED_CONFIGS.rglob("*.toml")):
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        if model_family(raw) not in (None, "rnn", "transformer") or "series" in raw:
            continue
        try:
            cfg = load_experiment(path)
            joey = HARNESS.joeynmt_config(cfg, Path("/tmp/peers"))
        except (SystemExit, AttnlabError):  # no JoeyNMT counterpart (dot, no attention), or not a translation config
            continue
        out.append((str(path.relative_to(PACKAGED_CONFIGS).with_suffix("")), cfg, joey))
    return out


CONFIGS = harness_configs()
IDS = [n for n, _, _ in CONFIGS]


def test_the_harness_has_configs_to_compare():
    assert "demo" in IDS and "bible-transformer-small" in IDS, IDS
    assert {kind_of(joey) for _, _, joey in CONFIGS} == {"rnn", "transformer"}


@pytest.mark.parametrize("name,cfg,joey", CONFIGS, ids=IDS)
def test_each_joeynmt_config_holds_joeynmts_rules(name, cfg, joey):
    assert set(joey) <= KNOWN[""], set(joey) - KNOWN[""]
    for section in ("data", "testing", "training", "model"):
        assert set(joey[section]) <= KNOWN[section], (section, set(joey[section]) - KNOWN[section])
    for side in ("src", "trg"):
        assert set(joey["data"][side]) <= KNOWN["side"]
    t, test = joey["training"], joey["testing"]
    for key, value in (("training.batch_size", t["batch_size"]), ("testing.batch_size", test["batch_size"]),
                       ("testing.beam_size", test["beam_size"]), ("training.batch_multiplier", t["batch_multiplier"]),
                       ("training.validation_freq", t["validation_freq"]), ("training.updates", t["updates"])):
        assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (key, value)
    assert t["batch_type"] in ("token", "sentence") and test["batch_type"] in ("token", "sentence")
    assert 0 < t["learning_rate"] and 0 <= t["label_smoothing"] < 1 and len(t["adam_betas"]) == 2
    assert t["normalization"] in ("batch", "tokens", "none")
    assert t["early_stopping_metric"] in ("acc", "loss", "ppl", "bleu", "chrf")
    assert t.get("scheduling") in (None, "plateau", "decaying", "exponential", "noam", "warmupexponentialdecay",
                                   "warmupinversesquareroot")
    model = joey["model"]
    for part in ("encoder", "decoder"):
        block = model[part]
        assert set(block) <= KNOWN["block"], (part, set(block) - KNOWN["block"])
        assert set(block["embeddings"]) <= KNOWN["embeddings"], (part, set(block["embeddings"]))
        assert block["type"] in ("transformer", "recurrent") and block["num_layers"] >= 1
        assert block["hidden_size"] > 0 and 0 <= block["dropout"] < 1
        if block["type"] == "transformer":
            assert block["hidden_size"] % block["num_heads"] == 0 and block["ff_size"] > 0
            assert block["embeddings"]["embedding_dim"] == block["hidden_size"]
            assert block["layer_norm"] in ("pre", "post")  # JoeyNMT's encoder defaults differ inside: always written
    for init in ("initializer", "embed_initializer", "bias_initializer"):  # 2.3 knows no "xavier" any more
        assert model[init] in ("xavier_uniform", "xavier_normal", "uniform", "normal", "zeros"), (init, model[init])
    ids = joey["data"]["special_symbols"]
    assert len({ids[k] for k in ("unk_id", "pad_id", "bos_id", "eos_id")}) == 4


@pytest.mark.parametrize("name,cfg,joey", CONFIGS, ids=IDS)
def test_batch_sizes_and_validation_frequencies_are_what_joeynmt_accepts(name, cfg, joey):
    t = joey["training"]
    for key in ("batch_size", "batch_multiplier", "validation_freq", "logging_freq"):
        assert isinstance(t[key], int) and t[key] > 0, (key, t[key])
    assert joey["testing"]["batch_size"] > 0
    # JoeyNMT 2.3's parse_train_args: logging_freq <= validation_freq and divides it (else ConfigurationError)
    assert t["logging_freq"] <= t["validation_freq"] and t["validation_freq"] % t["logging_freq"] == 0
    # the harness's 50-update throughput windows, and dev BLEU points often enough to see it rise in minutes
    assert t["logging_freq"] == HARNESS.LOG_EVERY and t["validation_freq"] <= 200


@pytest.mark.parametrize("name,cfg,joey", CONFIGS, ids=IDS)
def test_joeynmt_carries_its_examples_settings_except_the_documented_departures(name, cfg, joey):
    kind = kind_of(joey)
    departing = {key for key, value in EXAMPLE[kind].items() if setting(joey, key) != value}
    undocumented = {key: (setting(joey, key), EXAMPLE[kind][key]) for key in departing
                    if key not in SETTINGS.DEPARTURES}
    assert not undocumented, f"{name}: settings (harness, example) that depart without a reason: {undocumented}"
    rows = HARNESS.departures(joey, kind)
    harness_only = {key for key, (value, _) in SETTINGS.EXAMPLES[kind].items()  # settings this copy leaves out
                    if key not in EXAMPLE[kind] and setting(joey, key) != value}
    assert {r["setting"] for r in rows} == departing | harness_only
    for r in rows:
        assert r["why"] and r["example_file"].startswith("configs/") and r["harness"] == setting(joey, r["setting"])
    # the harness's copy of the examples says what this independent copy says
    assert {key: value for key, (value, _) in SETTINGS.EXAMPLES[kind].items() if key in EXAMPLE[kind]} == EXAMPLE[kind]


@pytest.mark.parametrize("name,cfg,joey", CONFIGS, ids=IDS)
def test_what_must_match_for_a_fair_comparison_does(name, cfg, joey):
    t, d, model = joey["training"], joey["testing"], joey["model"]
    assert (t["batch_size"], t["batch_type"], t["batch_multiplier"]) == (cfg.train.max_tokens, "token",
                                                                         cfg.train.accum_steps)
    assert (d["beam_size"], d["beam_alpha"]) == (cfg.decode.beam_size, cfg.decode.length_penalty)
    assert joey["data"]["src"]["voc_file"] == joey["data"]["trg"]["voc_file"]  # attnlab's pieces, both sides
    assert joey["data"]["src"]["max_length"] == joey["data"]["trg"]["max_length"] == -1  # attnlab's filtered split
    if kind_of(joey) == "transformer":
        tr = cfg.model.transformer
        for part, layers in (("encoder", tr.enc_layers), ("decoder", tr.dec_layers)):
            block = model[part]
            assert (block["num_layers"], block["num_heads"], block["hidden_size"], block["ff_size"],
                    block["layer_norm"]) == (layers, tr.h, tr.d_model, tr.d_ff, tr.norm)
    else:
        r = cfg.model.rnn
        for part, layers in (("encoder", r.enc_layers), ("decoder", r.dec_layers)):
            block = model[part]
            assert (block["rnn_type"], block["num_layers"], block["hidden_size"],
                    block["embeddings"]["embedding_dim"]) == (r.cell, layers, r.hidden_dim, r.emb_dim)
        assert model["encoder"]["bidirectional"] == r.bidirectional
        # Bahdanau's context always feeds JoeyNMT's RNN input; Luong's general score is JoeyNMT's "luong", with or
        # without input feeding as attnlab's config says, and the scaling JoeyNMT lacks is named
        expected = ("bahdanau", True) if r.attention == "bahdanau" else ("luong", r.input_feeding)
        assert (model["decoder"]["attention"], model["decoder"]["input_feeding"]) == expected
        named = HARNESS.model_differences(cfg)
        assert any("sqrt(H)" in d for d in named) == (r.attention == "general" and r.scaled_scores)


def test_luong_configs_have_a_counterpart_and_the_rest_of_the_rnns_do_not():
    kinds = {n: c.model.rnn.attention for n, c, j in CONFIGS if kind_of(j) == "rnn"}
    assert "pretrained/luong" in kinds and kinds["pretrained/luong"] == "general", kinds
    assert set(kinds.values()) <= {"bahdanau", "general"}


def test_normalization_and_updates_are_where_joeynmt_2_3_reads_them():
    for _, _, joey in CONFIGS:
        assert joey["training"]["normalization"] == "tokens" and "normalization" not in joey
        assert "updates" in joey["training"] and "max_updates" not in joey["training"]


def test_the_yaml_joeynmt_reads_is_the_config():
    yaml = pytest.importorskip("yaml")
    for name, _, joey in CONFIGS:
        assert yaml.safe_load(HARNESS.to_yaml(joey)) == joey, name


def test_command_line_recipe_changes_are_recorded_as_departures():
    cfg = next(c for n, c, _ in CONFIGS if n == "bible-transformer-small")
    options = SETTINGS.JoeyOptions(lr=0.001, schedule="warmupinversesquareroot", warmup=400, valid_every=150,
                                  sets=(("model.encoder.dropout", 0.1),))
    joey = HARNESS.joeynmt_config(cfg, Path("/tmp/peers"), options)
    t = joey["training"]
    assert (t["learning_rate"], t["scheduling"], t["learning_rate_warmup"], t["validation_freq"]) == (
        0.001, "warmupinversesquareroot", 400, 150)
    assert joey["model"]["encoder"]["dropout"] == 0.1 and joey["model"]["decoder"]["dropout"] == 0.3
    why = {r["setting"]: r["why"] for r in HARNESS.departures(joey, "transformer", options)}
    for key, flag in (("training.learning_rate", "--joey-lr"), ("training.scheduling", "--joey-schedule"),
                      ("training.learning_rate_warmup", "--joey-warmup"), ("model.encoder.dropout", "--joey-set")):
        assert why[key].startswith(flag), (key, why[key])
    constant = HARNESS.joeynmt_config(cfg, Path("/tmp/peers"), SETTINGS.JoeyOptions(schedule="none"))
    assert "scheduling" not in constant["training"]  # JoeyNMT's constant rate (patch_joeynmt.py allows it)


@pytest.mark.parametrize("kwargs", [dict(valid_every=75), dict(valid_every=0), dict(lr=0.0), dict(warmup=0),
                                    dict(schedule="noam")])
def test_joey_options_refuse_what_joeynmt_would_refuse(kwargs):
    with pytest.raises(ValueError):
        SETTINGS.JoeyOptions(**kwargs)


def test_a_warmup_needs_a_warmup_schedule():
    with pytest.raises(ValueError, match="warm-up schedule"):
        SETTINGS.JoeyOptions(warmup=400).settings("rnn")
    assert HARNESS.parse_set("model.encoder.dropout=0.1") == ("model.encoder.dropout", 0.1)
    assert HARNESS.parse_set("training.scheduling=plateau") == ("training.scheduling", "plateau")
    with pytest.raises(ValueError):
        HARNESS.parse_set("dropout")


def test_a_dev_subset_as_large_as_the_dev_split_is_refused_before_training(tmp_path):
    """JoeyNMT 2.3 asserts sample_dev_subset < the dev split only at its first validation, minutes into a run."""
    cfg = load_experiment("demo")
    options = SETTINGS.JoeyOptions(sets=(HARNESS.parse_set("data.sample_dev_subset=100"),))
    joey = HARNESS.joeynmt_config(cfg, tmp_path, options)
    with pytest.raises(SystemExit, match="sample_dev_subset=100: .* 100 verses"):
        SETTINGS.check_dev_subset(joey, 100)
    SETTINGS.check_dev_subset(joey, 101)
    SETTINGS.check_dev_subset(HARNESS.joeynmt_config(cfg, tmp_path), 100)  # -1: the whole dev split


@pytest.mark.parametrize("config, kind", [("demo", "rnn"), ("bible-transformer-small", "transformer")])
def test_the_minutes_recipe_is_the_one_the_record_measured_and_flags_still_win(tmp_path, config, kind):
    """--joey-recipe minutes writes the settings of docs/results.md's runs in which JoeyNMT learned in 7 minutes,
    each a departure with its reason; a flag given beside it replaces the recipe's value."""
    cfg = load_experiment(config)
    want = {"rnn": {"training.learning_rate": 0.003, "training.batch_size": 1000, "training.clip_grad_norm": 1.0,
                    "training.validation_freq": 100},
            "transformer": {"training.learning_rate": 0.001, "training.batch_size": 1000,
                            "model.encoder.dropout": 0.1, "model.decoder.dropout": 0.1,
                            "data.sample_dev_subset": 100, "training.validation_freq": 200}}[kind]
    want.update({"training.scheduling": "warmupinversesquareroot", "training.learning_rate_warmup": 200})
    options = SETTINGS.recipe_options("minutes", kind)
    joey = HARNESS.joeynmt_config(cfg, tmp_path, options)
    assert {k: SETTINGS.get_setting(joey, k) for k in want} == want
    moved = {r["setting"] for r in SETTINGS.departures(joey, kind, options)}
    assert set(want) - {"data.sample_dev_subset"} <= moved  # each one a departure from the example, with its why
    why = {r["setting"]: r["why"] for r in SETTINGS.departures(joey, kind, options)}
    assert why["training.learning_rate"].startswith("--joey-recipe minutes")
    assert why["training.batch_size"].startswith("--joey-recipe minutes")
    mine = SETTINGS.recipe_options("minutes", kind, lr=0.0005, valid_every=300,
                                   sets=(("training.batch_size", 2000),))
    joey = HARNESS.joeynmt_config(cfg, tmp_path, mine)
    why = {r["setting"]: r["why"] for r in SETTINGS.departures(joey, kind, mine)}
    assert why["training.learning_rate"].startswith("--joey-lr 0.0005")
    assert why["training.batch_size"].startswith("--joey-set training.batch_size=2000")
    assert why["training.scheduling"].startswith("--joey-recipe minutes")
    assert (SETTINGS.get_setting(joey, "training.learning_rate"), SETTINGS.get_setting(joey, "training.batch_size"),
            SETTINGS.get_setting(joey, "training.validation_freq")) == (0.0005, 2000, 300)
    example = HARNESS.joeynmt_config(cfg, tmp_path, SETTINGS.recipe_options("example", kind))
    assert example == HARNESS.joeynmt_config(cfg, tmp_path)
    with pytest.raises(ValueError, match="--joey-recipe"):
        SETTINGS.recipe_options("fast", kind)
    with pytest.raises(ValueError, match="--joey-valid-every"):  # 0 is refused, not read as "the recipe's"
        SETTINGS.recipe_options("minutes", kind, valid_every=0)

JOEY_LOG = """\
2026-11-28 10:00:00,000 - INFO - joeynmt.training - Train config:
2026-11-28 10:00:05,500 - INFO - joeynmt.training - EPOCH 1
2026-11-28 10:00:20,000 - INFO - joeynmt.training - Epoch   1, Step:       50, Batch Loss:     5.1, Batch Acc: 0.1, \
Tokens per Sec:     3900, Lr: 0.000200
2026-11-28 10:00:40,000 - INFO - joeynmt.prediction - Generation took 2.5000[sec].
2026-11-28 10:00:40,100 - INFO - joeynmt.prediction - Evaluation result (greedy): bleu:   0.12, loss:   5.01, \
ppl: 150.00, acc:   0.16, 0.0500[sec]
2026-11-28 10:01:15,000 - INFO - joeynmt.prediction - Generation took 2.0000[sec].
2026-11-28 10:01:15,500 - INFO - joeynmt.prediction - Evaluation result (greedy): bleu:   1.50, loss:   4.20, \
ppl:  66.00, acc:   0.25, 0.0400[sec]
"""
JOEY_VALIDATIONS = ("Steps: 100\tloss: 5.01000\tacc: 0.16000\tppl: 150.00000\tbleu: 0.12000\tLR: 0.00020000\t*\n"
                    "Steps: 200\tloss: 4.20000\tacc: 0.25000\tppl: 66.00000\tbleu: 1.50000\tLR: 0.00020000\t*\n")


def test_joeynmts_dev_curve_is_read_from_its_validations_and_log():
    curve = HARNESS.joeynmt_dev_curve(JOEY_VALIDATIONS, JOEY_LOG)
    assert [(p["step"], p["bleu"], p["loss"], p["lr"], p["best"]) for p in curve] == [
        (100, 0.12, 5.01, 0.0002, True), (200, 1.5, 4.2, 0.0002, True)]
    assert [p["time_s"] for p in curve] == [34.6, 70.0]  # since "EPOCH 1", validation included
    assert [p["time_s"] for p in HARNESS.joeynmt_dev_curve(JOEY_VALIDATIONS, "")] == [None, None]
    assert [float(x) for x in HARNESS.JOEY_GEN.findall(JOEY_LOG)] == [2.5, 2.0]
    assert [float(x) for _, x in HARNESS.JOEY_EVAL.findall(JOEY_LOG)] == [0.05, 0.04]


def test_attnlabs_dev_curve_is_read_from_its_metrics():
    records = [{"step": 50, "tokens_per_s": 14000.0, "time_s": 10.0},
               {"step": 300, "dev_loss": 4.1, "dev_ppl": 60.3, "bleu": 3.2, "improved": True, "time_s": 70.5}]
    assert HARNESS.attnlab_dev_curve(records) == [
        {"step": 300, "time_s": 70.5, "bleu": 3.2, "dev_loss": 4.1, "dev_ppl": 60.3}]
