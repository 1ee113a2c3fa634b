"""JoeyNMT's own example settings, and the JoeyNMT 2.3 config the side-by-side builds from them (issue 49).

JoeyNMT is configured as its users configure it: every setting of the JoeyNMT config starts as the value of JoeyNMT's
example config for the same kind of model (`EXAMPLES`, each value with the file it comes from, in the public
repository joeynmt/joeynmt), and the harness departs from it only where a fair comparison needs the same thing for
both toolkits: the data and vocabulary, attnlab's model (dimensions, layers, heads, tying, norm position), the token
budget of a batch, the test beam search, the throughput window, and a validation interval short enough to see dev
BLEU rise in minutes. `DEPARTURES` gives the reason for each; `departures()` lists the ones a config takes, and a
difference without a reason is a bug (tests/test_peers_config.py checks every packaged config).

The examples:
- RNN: `configs/iwslt14_deen_bpe.yaml`, JoeyNMT's RNN benchmark (IWSLT14 de-en; a bidirectional GRU encoder,
  a GRU decoder with Bahdanau attention, a bridge and input feeding; its model is published for JoeyNMT 2.x).
  It leaves the initializers to JoeyNMT's defaults; those come from `configs/rnn_small.yaml`, the 2.x example of
  the same model kind that spells them out.
- Transformer: `configs/transformer_iwslt14_deen_bpe.yaml`, JoeyNMT's Transformer benchmark (IWSLT14 de-en) and its
  only example with the small Transformer's dimensions (256 wide, 4 heads, feed-forward 1024). It was written for
  JoeyNMT 1.x, which always normalizes before each sub-layer; the 2.x keys for that (`layer_norm`, `activation`)
  come from `configs/iwslt14_deen_sp.yaml`, the 2.x Transformer example. Its 2.x spelling of `xavier` is
  `xavier_uniform`.

The learning rate and its schedule are the examples' own, tuned for runs of days; the harness options
(`JoeyOptions`: --joey-lr, --joey-schedule, --joey-warmup, --joey-set) change them for a short run, and every change
is recorded as a departure with its reason.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.decode.translate import batch_size_for
from attnlab.families.translation import ExperimentConfig

LOG_EVERY = 50  # updates per throughput window, both toolkits (JoeyNMT's logging_freq)
VALID_EVERY = 100  # JoeyNMT's validation interval in updates: ~10 dev BLEU points in a 7-minute CPU run
SCHEDULES = ("plateau", "warmupinversesquareroot", "none")  # what --joey-schedule offers ("none": constant)

RNN = "configs/iwslt14_deen_bpe.yaml"
RNN_INIT = "configs/rnn_small.yaml"
TRANSFORMER = "configs/transformer_iwslt14_deen_bpe.yaml"
TRANSFORMER_2X = "configs/iwslt14_deen_sp.yaml"
UNSET_1X = " (unset: JoeyNMT 1.x's default)"

# setting (dotted path in JoeyNMT's config) -> (the example's value, the file in joeynmt/joeynmt); None: not set
EXAMPLES: dict[str, dict[str, tuple[object, str]]] = {
    "rnn": {
        "training.optimizer": ("adam", RNN),
        "training.adam_betas": ([0.9, 0.999], RNN_INIT),
        "training.learning_rate": (0.0002, RNN),
        "training.learning_rate_min": (1.0e-8, RNN + UNSET_1X),
        "training.scheduling": ("plateau", RNN),
        "training.patience": (8, RNN),
        "training.decrease_factor": (0.7, RNN),
        "training.learning_rate_warmup": (None, RNN),
        "training.weight_decay": (0.0, RNN),
        "training.clip_grad_norm": (None, RNN),  # "#clip_grad_norm: 1.0", commented out
        "training.clip_grad_val": (None, RNN),
        "training.label_smoothing": (0.0, RNN + UNSET_1X),
        "training.normalization": ("tokens", RNN),
        "training.batch_size": (80, RNN),
        "training.batch_type": ("sentence", RNN + UNSET_1X),
        "training.early_stopping_metric": ("loss", RNN),
        "training.validation_freq": (2000, RNN),
        "training.logging_freq": (500, RNN),
        "testing.eval_metrics": (["bleu"], RNN + " (eval_metric)"),
        "testing.beam_size": (5, RNN),
        "testing.beam_alpha": (1.0, RNN + " (alpha)"),
        "testing.max_output_length": (80, RNN),
        "data.src.max_length": (62, RNN + " (max_sent_length)"),
        "data.trg.max_length": (62, RNN + " (max_sent_length)"),
        "model.initializer": ("xavier_uniform", RNN_INIT),
        "model.init_gain": (1.0, RNN_INIT),
        "model.embed_initializer": ("normal", RNN_INIT),
        "model.embed_init_weight": (0.1, RNN_INIT),
        "model.bias_initializer": ("zeros", RNN_INIT),
        "model.init_rnn_orthogonal": (False, RNN_INIT),
        "model.lstm_forget_gate": (1.0, RNN_INIT),
        "model.tied_embeddings": (False, RNN + UNSET_1X),
        "model.tied_softmax": (False, RNN + UNSET_1X),
        "model.encoder.type": ("recurrent", RNN + UNSET_1X),
        "model.encoder.rnn_type": ("gru", RNN),
        "model.encoder.embeddings.embedding_dim": (620, RNN),
        "model.encoder.embeddings.scale": (False, RNN),
        "model.encoder.hidden_size": (500, RNN),
        "model.encoder.bidirectional": (True, RNN),
        "model.encoder.num_layers": (1, RNN),
        "model.encoder.dropout": (0.0, RNN),
        "model.decoder.type": ("recurrent", RNN + UNSET_1X),
        "model.decoder.rnn_type": ("gru", RNN),
        "model.decoder.embeddings.embedding_dim": (620, RNN),
        "model.decoder.embeddings.scale": (False, RNN),
        "model.decoder.hidden_size": (1000, RNN),
        "model.decoder.num_layers": (1, RNN),
        "model.decoder.dropout": (0.0, RNN),
        "model.decoder.hidden_dropout": (0.2, RNN),
        "model.decoder.input_feeding": (True, RNN),
        "model.decoder.init_hidden": ("bridge", RNN),
        "model.decoder.attention": ("bahdanau", RNN),
    },
    "transformer": {
        "training.optimizer": ("adam", TRANSFORMER),
        "training.adam_betas": ([0.9, 0.999], TRANSFORMER),
        "training.learning_rate": (0.0003, TRANSFORMER),
        "training.learning_rate_min": (1.0e-8, TRANSFORMER),
        "training.scheduling": ("plateau", TRANSFORMER),
        "training.patience": (5, TRANSFORMER),
        "training.decrease_factor": (0.7, TRANSFORMER),
        "training.learning_rate_warmup": (None, TRANSFORMER),
        "training.weight_decay": (0.0, TRANSFORMER),
        "training.clip_grad_norm": (None, TRANSFORMER),
        "training.clip_grad_val": (None, TRANSFORMER),
        "training.label_smoothing": (0.1, TRANSFORMER),
        "training.normalization": ("tokens", TRANSFORMER),
        "training.batch_size": (4096, TRANSFORMER),
        "training.batch_type": ("token", TRANSFORMER),
        "training.early_stopping_metric": ("bleu", TRANSFORMER + " (eval_metric: bleu)"),
        "training.validation_freq": (1000, TRANSFORMER),
        "training.logging_freq": (100, TRANSFORMER),
        "testing.eval_metrics": (["bleu"], TRANSFORMER + " (eval_metric)"),
        "testing.beam_size": (5, TRANSFORMER),
        "testing.beam_alpha": (1.0, TRANSFORMER + " (alpha)"),
        "testing.max_output_length": (100, TRANSFORMER),
        "data.src.max_length": (62, TRANSFORMER + " (max_sent_length)"),
        "data.trg.max_length": (62, TRANSFORMER + " (max_sent_length)"),
        "model.initializer": ("xavier_uniform", TRANSFORMER + " (xavier)"),
        "model.init_gain": (1.0, TRANSFORMER),
        "model.embed_initializer": ("xavier_uniform", TRANSFORMER + " (xavier)"),
        "model.embed_init_gain": (1.0, TRANSFORMER),
        "model.bias_initializer": ("zeros", TRANSFORMER),
        "model.tied_embeddings": (True, TRANSFORMER),
        "model.tied_softmax": (True, TRANSFORMER),
        **{f"model.{part}.{key}": value for part in ("encoder", "decoder") for key, value in {
            "type": ("transformer", TRANSFORMER),
            "num_layers": (6, TRANSFORMER),
            "num_heads": (4, TRANSFORMER),
            "embeddings.embedding_dim": (256, TRANSFORMER),
            "embeddings.scale": (True, TRANSFORMER),
            "embeddings.dropout": (0.0, TRANSFORMER),
            "hidden_size": (256, TRANSFORMER),
            "ff_size": (1024, TRANSFORMER),
            "dropout": (0.3, TRANSFORMER),
            "layer_norm": ("pre", TRANSFORMER_2X),
            "activation": ("relu", TRANSFORMER_2X),
        }.items()},
    },
}

_SAME_MODEL = "attnlab's model dimensions: both toolkits train a model of the same size"
_ARCHITECTURE = "attnlab's architecture for this config: both toolkits train the same model"
# setting -> why the harness departs from the example there (used only where the values differ)
DEPARTURES: dict[str, str] = {
    "training.batch_size": "attnlab's token budget (train.max_tokens), the same for both toolkits",
    "training.batch_type": "attnlab batches by tokens: a token budget is how both see the same text per update",
    "training.validation_freq": f"--joey-valid-every (default {VALID_EVERY} updates), so dev BLEU is seen rising "
                                "within minutes; the example's interval is longer than the whole run",
    "training.logging_freq": f"the harness's throughput window ({LOG_EVERY} updates), the same for both toolkits",
    "testing.beam_size": "attnlab's decode.beam_size: both decode the test split with the same beam",
    "testing.beam_alpha": "attnlab's decode.length_penalty (GNMT alpha in both): the same test beam search",
    "testing.max_output_length": "-1, JoeyNMT's 1.5 x the longest source of the batch: its rule closest to "
                                 "attnlab's 1.5 x source + 10; a fixed 80-100 would cut long verses",
    "data.src.max_length": "no filter: the train split is attnlab's after its max_words filter, so both train "
                           "on the same pairs",
    "data.trg.max_length": "no filter: the train split is attnlab's after its max_words filter, so both train "
                           "on the same pairs",
    **{f"model.{part}.{key}": _SAME_MODEL for part in ("encoder", "decoder") for key in
       ("embeddings.embedding_dim", "hidden_size", "num_layers", "num_heads", "ff_size")},
    "model.decoder.hidden_size": _SAME_MODEL + " (attnlab's decoder is hidden_dim wide; the example's is twice "
                                 "its encoder's)",
    **{f"model.{part}.{key}": _ARCHITECTURE for part in ("encoder", "decoder") for key in
       ("rnn_type", "bidirectional", "layer_norm", "init_hidden")},
    "model.decoder.attention": _ARCHITECTURE + " (Luong's general score; JoeyNMT's has no 1/sqrt(H) for "
                               "attnlab's model.rnn.scaled_scores, and a bias in W_c, which attnlab's lacks: "
                               "differences no JoeyNMT setting expresses, listed in MODEL_DIFFERENCES)",
    "model.decoder.input_feeding": _ARCHITECTURE + " (attnlab's model.rnn.input_feeding)",
    "model.tied_embeddings": _ARCHITECTURE,
    "model.tied_softmax": _ARCHITECTURE,
}

# where the two models differ and no JoeyNMT setting can make them equal: (when it applies, what differs)
MODEL_DIFFERENCES: tuple[tuple[str, str], ...] = (
    ("luong_scaled", "Luong attention's scores: attnlab divides h_t^T W_a h_s by sqrt(H) (model.rnn.scaled_scores); "
                     "JoeyNMT's LuongAttention does not"),
    ("luong", "Luong's attentional state tanh(W_c [c_t; h_t]): JoeyNMT's W_c has a bias, attnlab's has none (eq. 5)"),
)


def model_differences(cfg: ExperimentConfig) -> list[str]:
    """The differences between attnlab's model and JoeyNMT's for the config that no JoeyNMT setting removes."""
    r = cfg.model.rnn
    luong = cfg.model.family == "rnn" and r.attention == "general"
    applies = {"luong_scaled": luong and r.scaled_scores, "luong": luong}
    return [what for key, what in MODEL_DIFFERENCES if applies[key]]


MINUTES_WHY = ("--joey-recipe minutes: with it JoeyNMT learned within 7 minutes on a 2-core CPU, where the example's "
               "recipe did not (short probes, docs/results.md)")
PROBE = "set on the command line (issue 49 gives JoeyNMT any setting that makes it learn faster; the docs say whether a probe chose it)"


@dataclass
class JoeyOptions:
    """The harness's command-line changes to the example's recipe (each one recorded as a departure).

    lr: JoeyNMT's learning_rate (with warmupinversesquareroot: the peak). schedule: "plateau",
    "warmupinversesquareroot" or "none" (constant). warmup: learning_rate_warmup (warm-up schedules only).
    valid_every: validation_freq in updates, a multiple of LOG_EVERY. sets: (dotted setting, value) pairs.
    """

    lr: float | None = None
    schedule: str | None = None
    warmup: int | None = None
    valid_every: int = VALID_EVERY
    sets: tuple[tuple[str, object], ...] = ()
    from_recipe: frozenset[str] = frozenset()  # "lr", "schedule", "warmup" and settings that --joey-recipe gave

    def __post_init__(self) -> None:
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"--joey-lr must be > 0, got {self.lr}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(f"--joey-schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.warmup is not None and self.warmup < 1:
            raise ValueError(f"--joey-warmup must be >= 1, got {self.warmup}")
        if self.valid_every < LOG_EVERY or self.valid_every % LOG_EVERY:
            raise ValueError(f"--joey-valid-every must be a positive multiple of {LOG_EVERY} (JoeyNMT's "
                             f"validation_freq must be divisible by its logging_freq), got {self.valid_every}")

    def settings(self, kind: str) -> dict[str, tuple[object, str]]:
        """setting -> (value, reason) for the example of `kind` ("rnn" or "transformer"); None deletes a key."""
        out: dict[str, tuple[object, str]] = {}
        example_schedule = EXAMPLES[kind]["training.scheduling"][0]
        schedule = self.schedule or example_schedule
        why = lambda key, flag: MINUTES_WHY if key in self.from_recipe else f"{flag}: {PROBE}"  # noqa: E731
        if self.lr is not None:
            out["training.learning_rate"] = (self.lr, why("lr", f"--joey-lr {self.lr:g}"))
        if self.schedule is not None:
            out["training.scheduling"] = (None if schedule == "none" else schedule,
                                          why("schedule", f"--joey-schedule {schedule}"))
        if schedule == "warmupinversesquareroot":
            warmup = self.warmup or EXAMPLES[kind]["training.learning_rate_warmup"][0] or 4000  # iwslt14_deen_sp
            out["training.learning_rate_warmup"] = (warmup, why("warmup", f"--joey-warmup {warmup}") if self.warmup
                                                    else f"the warm-up of {TRANSFORMER_2X} (4000), the 2.x "
                                                         "example that warms up")
        elif self.warmup is not None:
            raise ValueError(f"--joey-warmup needs a warm-up schedule (--joey-schedule warmupinversesquareroot); "
                             f"the {kind} example schedules by {example_schedule}")
        for setting, value in self.sets:
            out[setting] = (value, why(setting, f"--joey-set {setting}={json.dumps(value)}"))
        return out

    def as_dict(self) -> dict:
        return {"lr": self.lr, "schedule": self.schedule, "warmup": self.warmup, "valid_every": self.valid_every,
                "sets": dict(self.sets), "from_recipe": sorted(self.from_recipe)}


# --joey-recipe minutes: what made JoeyNMT learn within 7 minutes on a 2-core CPU, chosen by short probes
# (2026-11-29, docs/results.md "The peers"): more, smaller updates and a warm-up. With the examples' recipe and
# attnlab's token budget its dev BLEU stayed under 0.1 there (the Luong GRU, the Transformer).
RECIPES = ("example", "minutes")
MINUTES_RECIPE: dict[str, dict] = {
    "rnn": {"lr": 0.003, "schedule": "warmupinversesquareroot", "warmup": 200, "valid_every": VALID_EVERY,
            "sets": {"training.batch_size": 1000, "training.clip_grad_norm": 1.0}},
    # its validations are slow until the model learns to stop (~40 s for 100 verses): fewer, on a dev subset
    "transformer": {"lr": 0.001, "schedule": "warmupinversesquareroot", "warmup": 200, "valid_every": 200,
                    "sets": {"training.batch_size": 1000, "model.encoder.dropout": 0.1,
                             "model.decoder.dropout": 0.1, "data.sample_dev_subset": 100}},
}


def recipe_options(recipe: str, kind: str, lr: float | None = None, schedule: str | None = None,
                   warmup: int | None = None, valid_every: int | None = None,
                   sets: tuple[tuple[str, object], ...] = ()) -> JoeyOptions:
    """The JoeyOptions of a recipe ("example": the example's own; "minutes": MINUTES_RECIPE[kind]) with the
    options given explicitly over it (a setting given by --joey-set replaces the recipe's)."""
    if recipe not in RECIPES:
        raise ValueError(f"--joey-recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    base = MINUTES_RECIPE[kind] if recipe == "minutes" else {"sets": {}}
    given = dict(sets)
    flags = {"lr": lr, "schedule": schedule, "warmup": warmup}
    from_recipe = {k for k in flags if k in base and flags[k] is None} | (set(base["sets"]) - set(given))
    return JoeyOptions(lr=lr if lr is not None else base.get("lr"),
                       schedule=schedule or base.get("schedule"),
                       warmup=warmup if warmup is not None else base.get("warmup"),
                       valid_every=valid_every if valid_every is not None else base.get("valid_every", VALID_EVERY),
                       sets=tuple({**base["sets"], **given}.items()), from_recipe=frozenset(from_recipe))


def parse_set(text: str) -> tuple[str, object]:
    """'model.encoder.dropout=0.1' -> ('model.encoder.dropout', 0.1); JSON values (numbers, true, lists), else a
    string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--joey-set takes SETTING=VALUE (e.g. model.encoder.dropout=0.1), got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


# ---------------------------------------------------------------------------------------------- dotted paths
def get_setting(config: dict, setting: str):
    """The value at a dotted path of a nested dict, None when any part is missing."""
    node = config
    for part in setting.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def put_setting(config: dict, setting: str, value) -> None:
    """Sets a dotted path of a nested dict (creating the dicts on the way); None removes the key."""
    *parents, last = setting.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


# ---------------------------------------------------------------------------------------------- the config
def model_kind(cfg: ExperimentConfig) -> str:
    """"rnn" or "transformer": the JoeyNMT example the attnlab config compares with; SystemExit when JoeyNMT has no
    counterpart of its model."""
    m = cfg.model
    if m.family == "transformer":
        if m.transformer.positions != "sinusoidal" or m.transformer.activation != "relu":
            raise SystemExit("JoeyNMT's Transformer has sinusoidal positions and ReLU only")
        return "transformer"
    if m.family == "rnn" and m.rnn.attention in ("bahdanau", "general") and m.rnn.cell in ("gru", "lstm"):
        return "rnn"
    raise SystemExit("only the GRU/LSTM models with Bahdanau or Luong general attention, and the Transformer, have a "
                     "JoeyNMT counterpart here")


def harness_settings(cfg: ExperimentConfig, out: Path, options: JoeyOptions) -> dict[str, object]:
    """What the harness writes over the example (setting -> value): paths, attnlab's data, model and budget, the
    test beam, the windows; where these differ from the example, DEPARTURES says why."""
    t, d, kind = cfg.train, cfg.decode, model_kind(cfg)
    side = lambda lang: {  # noqa: E731  (attnlab's pieces: its SentencePiece model and all its pieces)
        "lang": lang, "level": "bpe", "lowercase": False, "normalize": False, "max_length": -1, "min_length": -1,
        "voc_file": str(out / "vocab.txt"), "tokenizer_type": "sentencepiece",
        "tokenizer_cfg": {"model_file": str(out / "spm.model")}}
    s: dict[str, object] = {
        "data.train": str(out / "data" / "train"), "data.dev": str(out / "data" / "dev"),
        "data.test": str(out / "data" / "test"), "data.dataset_type": "plain", "data.sample_dev_subset": -1,
        "data.src": side("en"), "data.trg": side("es"),
        "data.special_symbols": {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>", "pad_id": 1,
                                 "bos_token": "<s>", "bos_id": 2, "eos_token": "</s>", "eos_id": 3},
        "testing.n_best": 1, "testing.beam_size": d.beam_size, "testing.beam_alpha": d.length_penalty,
        # attnlab's own CPU choice when decode.batch_size is 0 ("by device"): JoeyNMT needs a number
        "testing.batch_size": batch_size_for(d, torch.device("cpu")), "testing.batch_type": "sentence",
        "testing.max_output_length": -1, "testing.sacrebleu_cfg": {"tokenize": "13a"},
        "testing.load_model": str(out / "model" / "latest.ckpt"),  # the weights at the deadline
        "training.model_dir": str(out / "model"), "training.overwrite": True, "training.shuffle": True,
        "training.use_cuda": False, "training.random_seed": t.seed, "training.epochs": 100000,
        "training.updates": t.max_steps, "training.keep_best_ckpts": 2, "training.print_valid_sents": [0],
        "training.batch_size": t.max_tokens, "training.batch_type": "token",
        "training.batch_multiplier": t.accum_steps,
        "training.validation_freq": options.valid_every, "training.logging_freq": LOG_EVERY}
    if kind == "transformer":
        tr = cfg.model.transformer
        s.update({"model.tied_embeddings": tr.tie_embeddings == "all",
                  "model.tied_softmax": tr.tie_embeddings in ("decoder", "all")})
        for part, layers in (("encoder", tr.enc_layers), ("decoder", tr.dec_layers)):
            s.update({f"model.{part}.num_layers": layers, f"model.{part}.num_heads": tr.h,
                      f"model.{part}.hidden_size": tr.d_model, f"model.{part}.ff_size": tr.d_ff,
                      f"model.{part}.embeddings.embedding_dim": tr.d_model, f"model.{part}.layer_norm": tr.norm})
    else:
        r = cfg.model.rnn
        s["model.tied_softmax"] = r.tie_embeddings
        for part, layers in (("encoder", r.enc_layers), ("decoder", r.dec_layers)):
            s.update({f"model.{part}.rnn_type": r.cell, f"model.{part}.num_layers": layers,
                      f"model.{part}.hidden_size": r.hidden_dim,
                      f"model.{part}.embeddings.embedding_dim": r.emb_dim})
        s["model.encoder.bidirectional"] = r.bidirectional
        s["model.decoder.init_hidden"] = "bridge" if r.bridge == "linear" else "last"
        # JoeyNMT's "luong" is Luong's general score h_t^T W_a h_s; Bahdanau's context always feeds the RNN input
        s["model.decoder.attention"] = "bahdanau" if r.attention == "bahdanau" else "luong"
        s["model.decoder.input_feeding"] = True if r.attention == "bahdanau" else r.input_feeding
    return s


def joeynmt_config(cfg: ExperimentConfig, out: Path, options: JoeyOptions | None = None) -> dict:
    """JoeyNMT 2.3's config for the attnlab config: the example's settings for its model kind, then the harness's
    (`harness_settings`), then the command line's (`JoeyOptions`). JoeyNMT 2.3 reads `normalization` in the
    training section and `fp16` at the top level. Its token batches count max(source, target) tokens of each pair
    (attnlab counts padded positions), so the batches are not identical; throughput is compared in real target
    tokens."""
    options = options or JoeyOptions()
    kind = model_kind(cfg)
    joey: dict = {"name": f"peers-{kind}", "joeynmt_version": "2.3.0", "use_cuda": False, "fp16": False,
                  "model_dir": str(out / "model"), "random_seed": cfg.train.seed,
                  "data": {}, "testing": {}, "training": {}, "model": {}}
    for setting, (value, _) in EXAMPLES[kind].items():
        put_setting(joey, setting, value)
    for setting, value in harness_settings(cfg, out, options).items():
        put_setting(joey, setting, value)
    for setting, (value, _) in options.settings(kind).items():
        put_setting(joey, setting, value)
    return joey


def check_dev_subset(joey: dict, dev_size: int) -> None:
    """SystemExit naming the setting when `data.sample_dev_subset` is not below the dev split's size: JoeyNMT 2.3
    asserts that at its first validation, minutes into the run."""
    subset = get_setting(joey, "data.sample_dev_subset")
    if subset is not None and subset >= dev_size:
        raise SystemExit(f"--joey-set data.sample_dev_subset={subset}: JoeyNMT samples only from a larger dev split; "
                         f"this config's dev split has {dev_size} verses (train.eval_max_sentences)")


def departures(joey: dict, kind: str, options: JoeyOptions | None = None) -> list[dict]:
    """Every place the JoeyNMT config departs from the example of `kind`: [{setting, example, example_file,
    harness, why}], the example's settings first, then command-line settings the example does not have
    (example_file None)."""
    reasons = {**DEPARTURES, **{k: why for k, (_, why) in (options or JoeyOptions()).settings(kind).items()}}
    rows = []
    for setting, (value, source) in EXAMPLES[kind].items():
        have = get_setting(joey, setting)
        if have != value:
            assert setting in reasons, f"{setting}: {have!r} departs from {source}'s {value!r} without a reason"
            rows.append({"setting": setting, "example": value, "example_file": source, "harness": have,
                         "why": reasons[setting]})
    for setting, why in reasons.items():
        if setting not in EXAMPLES[kind] and setting not in DEPARTURES:
            rows.append({"setting": setting, "example": None, "example_file": None,
                         "harness": get_setting(joey, setting), "why": why})
    return rows


def departures_markdown(rows: list[dict]) -> str:
    """The departures as a Markdown table: setting | JoeyNMT's example (file) | harness | why."""
    show = lambda v: "(not set)" if v is None else json.dumps(v)  # noqa: E731
    lines = ["| setting | JoeyNMT's example (file) | harness | why |", "|---|---|---|---|"]
    for r in rows:
        example = f"{show(r['example'])} ({r['example_file']})" if r["example_file"] else "(not in the example)"
        lines.append(f"| `{r['setting']}` | {example} | {show(r['harness'])} | {r['why']} |")
    return "\n".join(lines)


def to_yaml(value, indent: int = 0) -> str:
    """A small YAML writer (PyYAML reads 1e-08 as a string, so floats are written with a decimal point)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, dict):
                lines.append(f"{pad}{k}:\n{to_yaml(v, indent + 2)}")
            else:
                lines.append(f"{pad}{k}: {to_yaml(v)}")
        return "\n".join(lines)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.10f}".rstrip("0")
    if isinstance(value, list):
        return "[" + ", ".join(to_yaml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)
