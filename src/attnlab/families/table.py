"""The model families: one row each in `FAMILIES`, and the one place where a config or a run is recognised.

A family declares its config class, how a raw config (a file, or RUN_DIR/config.json) is recognised, how its
data, tokenizers and model are built, what it hands the trainer (`attnlab.training.trainer.Training`), how a run is
evaluated and summarised, and what it can do beyond that: its abilities (translate, generate, classify, regress),
its explorer hooks (`attnlab.families.base.Explorer`: every attention map of an input, what the server says of a
run, what an input costs) and its CTranslate2 and Hugging Face exports (and import). The run pipeline (`attnlab.runs.workflow`: train, resume,
load, evaluate, summary) calls these functions and nothing else, and the apps (server, explorer, report, export)
ask the row, never the family's name: adding a family is adding a row here, not copying a pipeline or a branch.

| family      | config                  | model                              | task (loss)         | selection   |
|-------------|-------------------------|------------------------------------|---------------------|-------------|
| rnn         | ExperimentConfig        | RNNSeq2Seq (Sutskever/Cho/Bahdanau) | Seq2SeqTask (CE)    | dev BLEU    |
| transformer | ExperimentConfig        | TransformerSeq2Seq (Vaswani)        | Seq2SeqTask (CE)    | dev BLEU    |
| lm          | LMExperimentConfig      | TransformerLM (decoder only)        | LMTask (CE)         | dev loss    |
| pair        | ParaphraseConfig        | DecomposableAttention, MiniLM       | PairTask (CE)       | dev accuracy|
| series      | SeriesExperimentConfig  | SeriesRNN (many-to-one)             | RegressionTask (SE) | dev MSE     |
| bert        | BertExperimentConfig    | BertEncoder (imported, not trained) | -                   | -           |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from attnlab.core.config import apply_overrides, read_config_file, to_dict
from attnlab.core.errors import AttnlabError
from attnlab.families import bert, lm, pairs, series, translation
from attnlab.families.base import Explorer, Family, model_family


def _is_rnn(raw: dict) -> bool:
    """model.family = "rnn", or no model.family at all (ModelConfig's default) in a config of no other family."""
    return model_family(raw) in (None, "rnn") and not pairs.is_paraphrase_config(raw) \
        and not series.is_series_config(raw)


def _seq2seq(name: str, title: str, recognise: Callable[[dict], bool], export: str | None,
             hf_kind: str | None = None, hf_import: Callable[[dict, dict], dict] | None = None) -> Family:
    """The translation families share their config, pipeline and explorer functions; model.family picks the
    network."""
    return Family(
        name=name, title=title, config_class=translation.ExperimentConfig, recognise=recognise,
        load_data=translation.load_seq2seq_data,
        make_tokenizers=translation.make_seq2seq_tokenizers, build_model=translation.build_seq2seq,
        initialise=translation.init_seq2seq, complete=translation.resolve_init, training=translation.seq2seq_training,
        evaluate=translation.evaluate_seq2seq, format_eval=translation.format_seq2seq_eval,
        summary_inputs=translation.seq2seq_summary_inputs, abilities=frozenset({"translate"}),
        explorer=Explorer(translation.explore_seq2seq, translation.seq2seq_explorer_facts, translation.seq2seq_tokens),
        export=export, hf_kind=hf_kind, hf_import=hf_import,
        prepare=lambda cfg, out, force: translation.prepare_corpus(cfg, out=out, force=force))


FAMILIES: tuple[Family, ...] = (
    Family(name="lm", title="decoder-only Transformer LM", config_class=lm.LMExperimentConfig,
           recognise=lm.is_lm_config, load_data=lm.load_lm_data,
           make_tokenizers=lm.make_lm_tokenizers, build_model=lm.build_lm, training=lm.lm_training,
           evaluate=lm.evaluate_lm, format_eval=lm.format_lm_eval, summary_inputs=lm.lm_summary_inputs,
           abilities=frozenset({"generate"}),
           explorer=Explorer(lm.explore_generation, lm.lm_explorer_facts, lm.lm_tokens, empty_input=True),
           export="generator", hf_kind="causal-lm", hf_import=lm.imported_lm_config,
           prepare=lambda cfg, out, force: lm.load_lm_data(cfg, out=out, force=force)),
    Family(name="pair", title="sentence-pair classifier", config_class=pairs.ParaphraseConfig,
           recognise=pairs.is_paraphrase_config,
           load_data=lambda cfg, tokenizers: pairs.load_pairs(cfg), make_tokenizers=pairs.make_pair_tokenizers, build_model=pairs.build_pair_model,
           training=pairs.pair_training, evaluate=pairs.evaluate_pairs, format_eval=pairs.format_pair_eval,
           summary_inputs=pairs.pair_summary_inputs, abilities=frozenset({"classify"}),
           uses_tokenizers=lambda cfg: cfg.model.family != "minilm",  # MiniLM's WordPiece comes with its weights
           explorer=Explorer(pairs.explore_pair, pairs.pair_explorer_facts, pairs.pair_tokens, sentences=2)),
    Family(name="series", title="many-to-one series regressor", config_class=series.SeriesExperimentConfig,
           recognise=series.is_series_config, complete=series.complete_series,
           load_data=lambda cfg, tokenizers: series.make_splits(cfg.series), make_tokenizers=lambda cfg, data: None,
           build_model=series.build_series_model, training=series.series_training,
           evaluate=series.evaluate_series, format_eval=series.format_series_eval,
           summary_inputs=series.series_summary_inputs, abilities=frozenset({"regress"}),
           uses_tokenizers=lambda cfg: False),
    Family(name="bert", title="BERT-class encoder", config_class=bert.BertExperimentConfig,
           recognise=bert.is_bert_config, load_data=bert.not_trained,
           make_tokenizers=bert.not_trained, build_model=bert.build_bert, training=bert.not_trained,
           evaluate=bert.not_trained, format_eval=str, summary_inputs=bert.bert_summary_inputs,
           abilities=frozenset(),  # explored only: `attnlab serve`, `plot explore`, Run.explore
           explorer=Explorer(bert.explore_bert, bert.bert_explorer_facts, bert.bert_tokens, sentences=2),
           hf_kind="encoder", hf_import=bert.imported_bert_config),
    _seq2seq("transformer", "Transformer encoder-decoder", lambda raw: model_family(raw) == "transformer",
             export="translator", hf_kind="seq2seq", hf_import=translation.imported_config),
    _seq2seq("rnn", "RNN encoder-decoder", _is_rnn, export=None),  # CTranslate2 has no RNN models
)
_DEFAULT = FAMILIES[-1]

ABILITY_COMMANDS = {"translate": "attnlab translate / plot attention / report / serve",
                    "generate": "attnlab generate", "classify": "attnlab paraphrase evaluate / plot",
                    "regress": "attnlab series"}


def family_of_config(raw: dict) -> Family:
    """The family of a raw config dict (a config file or RUN_DIR/config.json). A translation config with an
    unknown model.family falls through to the RNN row, whose config check then names the valid families."""
    return next((f for f in FAMILIES if f.recognise(raw)), _DEFAULT)


def family_of(cfg: Any) -> Family:
    """The family of a typed config."""
    return family_of_config(to_dict(cfg))


def load_family_config(path: Path | str, overrides: list[str] | None = None) -> tuple[Family, Any]:
    """(family, typed config) of a config file plus `--set` overrides: the one reader of a config file (the file
    read once, its family looked up, the config completed and typed once)."""
    raw = apply_overrides(read_config_file(path), list(overrides or []))
    cfg = family_of_config(raw).new_config(raw)
    return family_of(cfg), cfg  # a config completed from pretrained.init (no [model] of its own) is its run's row


def titles(families: list[Family], conjunction: str = "and") -> str:
    """The families' titles listed for a message: "a, b and c"."""
    names = [f.title for f in families]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def explorer(family: Family, where: Path | str) -> Explorer:
    """The family's explorer hooks; an AttnlabError naming the families that have some, unless it has."""
    if family.explorer is None:
        can = titles([f for f in FAMILIES if f.explorer is not None], "or")
        raise AttnlabError(f"{where}: a {family.title} run has no attention to explore; explore a {can} run")
    return family.explorer


def require(family: Family, ability: str, where: Path | str) -> None:
    """An AttnlabError naming what the run can do instead, unless the family has `ability`."""
    if ability not in family.abilities and not family.abilities:  # explored only (an imported encoder)
        raise AttnlabError(f"{where}: a {family.title} run cannot {ability}; explore it (attnlab serve / plot "
                           "explore) or summarise it (attnlab summary)")
    if ability not in family.abilities:
        can = ", ".join(ABILITY_COMMANDS[a] for a in sorted(family.abilities))
        raise AttnlabError(f"{where}: a {family.title} run cannot {ability}; use {can} (or attnlab evaluate / "
                           "summary) with it")

