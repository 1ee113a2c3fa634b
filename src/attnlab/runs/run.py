"""Runs for use: `load` -> `Run` (translate, explore, generate, evaluate, summarise), `train`, `corpus`, the
packaged configs and `show`. `attnlab.app.api` re-exports all of it as the Python API (what `import attnlab`
gives); it lives here, below `attnlab.app.server`, because the web app serves `Run`s, and the API above both
starts the server (`api.serve`).

Every call takes the same path as the command line (`attnlab.runs.workflow`), so a run trained here is a run directory
like any other, and a user's mistake is the same one-line `attnlab.AttnlabError`: each public function checks its
arguments' types and ranges where it is entered (`attnlab.runs.checks`), with the command line's limits
(`attnlab.core.config.MAX_BEAM`, ...).
"""

from __future__ import annotations

import copy
import dataclasses
import html
import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import torch

from attnlab.core.config import (MAX_BEAM, MAX_COUNT, MAX_LEN, MAX_SAMPLES, MAX_SEED, MAX_VOCAB, PACKAGED_CONFIGS,
                                 apply_overrides, from_dict, packaged_configs, read_config_file, resolve_config,
                                 to_dict)
from attnlab.core.errors import AttnlabError
from attnlab.core.logs import in_notebook, read_metrics
from attnlab.data.corpus import SPLITS, normalize
from attnlab.data.store import Store
from attnlab.decode.sampling import generate
from attnlab.decode.translate import CTranslate2Translator, DecodeConfig, Translation, Translator
from attnlab.families.base import EvalOptions, Family, LoadedRun
from attnlab.families.explorer import Recording
from attnlab.families.table import family_of, family_of_config, load_family_config, require
from attnlab.families.translation import prepare_corpus
from attnlab.runs import views
from attnlab.runs.checks import (as_bool, as_int, as_optional_int, as_optional_number, as_optional_path,
                                 as_optional_text, as_path, as_text, as_texts)
from attnlab.runs.explore import explore_run
from attnlab.runs.workflow import count_parameters, ctranslate2_translator, evaluate_run, load_run, summary
from attnlab.runs.workflow import train as train_run
from attnlab.training.state import TrainerState

log = logging.getLogger("attnlab")

DATA_SUFFIXES = (".tsv", ".jsonl", ".json", ".txt")  # `corpus(path)`: a data file, not a config
COMPRESSED = (".gz", ".xz", ".bz2")
CHECKPOINTS = ("best", "last")


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class ConfigInfo:
    """A packaged config: its bare name (what `attnlab train NAME` takes), its file, the model family it trains
    and the first line of its leading comment."""

    name: str
    path: Path
    family: str
    description: str


def configs() -> list[ConfigInfo]:
    """The configs that ship with the package (`attnlab configs` prints them), sorted by name."""
    out = []
    for name in packaged_configs():
        path = PACKAGED_CONFIGS / f"{name}.toml"
        out.append(ConfigInfo(name, path, family_of_config(read_config_file(path)).name, _first_sentence(path)))
    return out


def _first_sentence(path: Path) -> str:
    """The first sentence of a config file's leading comment."""
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
        text = " ".join(words)
        end = text.find(". ")
        if end >= 0 or text.endswith("."):
            return text[: end + 1] if end >= 0 else text
    return " ".join(words)


def config_path(name: str | Path) -> Path:
    """The file of a config: an existing path as given, or a packaged config's bare name ("demo")."""
    return resolve_config(as_path("name", name))


def override_list(overrides: Mapping[str, Any] | Sequence[str] | None = None, **kw: Any) -> list[str]:
    """`--set` strings of overrides given as {"train.max_steps": 50}, ["train.max_steps=50"] or keywords with a
    double underscore for each dot (train__max_steps=50)."""
    items: list[str] = []
    if isinstance(overrides, Mapping):
        bad = [k for k in overrides if not isinstance(k, str)]
        if bad:
            raise AttnlabError(f"overrides: the keys are dotted config keys (str), not {type(bad[0]).__name__} "
                               f"{bad[0]!r:.40}")
        items += [f"{k}={_value(v)}" for k, v in overrides.items()]
    elif overrides is not None:
        if not isinstance(overrides, (list, tuple)) or not all(isinstance(o, str) for o in overrides):
            what = f"the string {overrides!r:.60}" if isinstance(overrides, str) else type(overrides).__name__
            if isinstance(overrides, (list, tuple)):
                what = next(f"{type(o).__name__} {o!r:.40} in the {what}" for o in overrides if not isinstance(o, str))
            raise AttnlabError(f"overrides: give a dict or a list of KEY=VALUE strings, not {what}")
        items += list(overrides)
    items += [f"{k.replace('__', '.')}={_value(v)}" for k, v in kw.items()]
    return items


def _value(v: Any) -> str:
    """A Python value as the YAML text an override holds (True -> true, [1, 2] -> [1, 2], "lstm" -> lstm)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, str) and (v == "" or v != v.strip() or v[0] in "[{&*!|>'\"%@`#" or ": " in v):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


class TypedConfig(NamedTuple):
    """A config read and typed once (`typed_config`): its family row, the typed config, and the name of its
    default run directory. `train` takes it as it is."""

    family: Family
    cfg: object  # the family's config dataclass
    name: str


def typed_config(config: Any, overrides: list[str]) -> TypedConfig:
    """(family, typed config, name) of a config given as a path or packaged name, a dict or a typed config,
    plus `--set` overrides; `name` is what the default run directory is called. A `TypedConfig` without
    overrides is returned as it is (the command line types a config once, then trains it)."""
    if isinstance(config, TypedConfig):
        if not overrides:
            return config
        config = config.cfg
    if isinstance(config, (str, Path)):
        cfg, name = load_family_config(resolve_config(config), overrides)[1], Path(config).stem
    elif isinstance(config, Mapping):
        raw = apply_overrides(copy.deepcopy(dict(config)), list(overrides))
        cfg, name = family_of_config(raw).new_config(raw), "run"
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        raw = apply_overrides(dataclasses.asdict(config), list(overrides))
        cfg, name = family_of(config).new_config(raw), "run"
    else:
        raise AttnlabError(f"config: give a config file, a packaged config's name (attnlab.configs()), a dict or a "
                           f"config object, not a {type(config).__name__}")
    return TypedConfig(family_of(cfg), cfg, name)  # overrides, or pretrained.init's run, may change the row


# ---------------------------------------------------------------------------------------------- runs
class Run:
    """A trained run loaded for use (`attnlab.load`): translate, explore, generate, evaluate, summarise.

    In a notebook a run displays itself as a card (family, size, training, best dev score); `run.explore(...)`
    displays the attention explorer inline.
    """

    def __init__(self, loaded: LoadedRun, engine: str = "torch", model_dir: Path | str | None = None) -> None:
        self.loaded = loaded
        self.engine = engine
        self._explorer: Translator | None = None
        self._translator: Translator | CTranslate2Translator | None = None
        if "translate" in loaded.family.abilities:
            self._explorer = Translator(loaded.model, loaded.tokenizers, loaded.cfg.decode, loaded.device)
            self._translator = self._explorer
            if engine == "ctranslate2":
                self._translator = ctranslate2_translator(loaded, model_dir)
        elif engine != "torch":
            raise AttnlabError(f"{loaded.run_dir}: engine {engine!r} decodes translation runs only")

    # ------------------------------------------------------------------ what the run is
    @property
    def path(self) -> Path:
        return self.loaded.run_dir

    @property
    def name(self) -> str:
        return self.loaded.run_dir.name

    @property
    def family(self) -> str:
        """The family's name: rnn, transformer, lm, pair or series."""
        return self.loaded.family.name

    @property
    def config(self) -> Any:
        """The run's typed config (the dataclasses of `attnlab.families.translation`, `attnlab.families.lm`, ...)."""
        return self.loaded.cfg

    @property
    def model(self) -> torch.nn.Module:
        return self.loaded.model

    @property
    def tokenizers(self):
        """The run's `attnlab.data.tokenizers.TokenizerPair` (None for families without a trained tokenizer)."""
        return self.loaded.tokenizers

    @property
    def device(self) -> torch.device:
        return self.loaded.device

    @property
    def checkpoint(self) -> str:
        return self.loaded.checkpoint

    @property
    def translator(self) -> Translator | CTranslate2Translator:
        """The run's translator (PyTorch, or CTranslate2 with engine="ctranslate2"); translation runs only."""
        self.require("translate")
        return self._translator

    def require(self, ability: str) -> None:
        """An AttnlabError naming the commands this run can do instead, unless its family can `ability`
        ("translate", "generate", "classify")."""
        require(self.loaded.family, ability, self.path)

    # ------------------------------------------------------------------ use
    def translations(self, sentences: Sequence[str], beam: int | None = None, n_best: int = 1,
                     need_weights: bool = False) -> list[list[Translation]]:
        """The n_best translations (text, score, tokens and, with need_weights, the attention) of each sentence,
        in input order; beam None: the run's decode.beam_size, 1: greedy. Sentences are normalised as the corpus
        is; an empty one gets no translation ([])."""
        self.require("translate")
        if isinstance(sentences, str):
            raise AttnlabError("translations() takes a list of sentences; translate() takes one sentence too")
        sentences = as_texts("sentences", sentences)
        beam, n_best = as_optional_int("beam", beam, 1, MAX_BEAM), as_int("n_best", n_best, 1, MAX_BEAM)
        as_bool("need_weights", need_weights)
        clean = [normalize(s) for s in sentences]
        keep = [i for i, s in enumerate(clean) if s]
        results = self._translator.translate([clean[i] for i in keep], beam_size=beam, n_best=n_best,
                                             need_weights=need_weights) if keep else []
        out: list[list[Translation]] = [[] for _ in clean]
        for i, nbest in zip(keep, results):
            out[i] = nbest
        warning = views.degenerate_warning([nbest[0].tgt_tokens if nbest else None for nbest in out])
        if warning:  # an untrained or broken model: one line on stderr (`attnlab translate`), not in the results
            log.warning("%s", warning)
        return out

    def translate(self, sentences: str | Sequence[str], beam: int | None = None) -> str | list[str]:
        """The best translation of one sentence (a str) or of each of a list (a list of str)."""
        one = isinstance(sentences, str)
        results = self.translations([sentences] if one else as_texts("sentences", sentences), beam)
        texts = [nbest[0].text if nbest else "" for nbest in results]
        return texts[0] if one else texts

    def explore(self, sentence: str, sentence_b: str | None = None, beam: int | None = None,
                max_new: int = 40) -> views.Exploration:
        """Every attention map of one input (`attnlab.runs.views.Exploration`, what `attnlab serve` shows): the
        translation of a sentence (beam: the run's by default), a language model's greedy continuation of a
        prompt (max_new tokens), or a sentence pair (sentence_b). In a notebook it displays the explorer."""
        sentence, beam = as_text("sentence", sentence), as_optional_int("beam", beam, 1, MAX_BEAM)
        sentence_b, max_new = as_optional_text("sentence_b", sentence_b), as_int("max_new", max_new, 1, MAX_LEN)
        text = normalize(sentence)
        hooks = self.loaded.family.explorer
        if not text and not (hooks is not None and hooks.empty_input):  # a language model may start from nothing
            raise AttnlabError("the sentence is empty")
        second = normalize(sentence_b) if sentence_b is not None else None
        ex = explore_run(self.loaded, text, second, beam, max_new, self._explorer)
        ex.input = text if second is None else f"{text} / {second}"
        return ex

    def generate(self, prompt: str = "", num: int = 1, max_len: int | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, scores: bool = False, control: bool = False) -> list[str] | list[tuple[str, float]]:
        """`num` samples of a language-model run after `prompt` (settings default to the run's [generate]);
        scores=True: (text, log-probability) pairs; control=True: the tokenizer's control pieces (newlines, tabs:
        never generated by default, `attnlab.decode.sampling.generate`) may be sampled."""
        self.require("generate")
        prompt, num = as_text("prompt", prompt), as_int("num", num, 1, MAX_SAMPLES)
        seed, max_len = as_int("seed", seed, 0, MAX_SEED), as_optional_int("max_len", max_len, 1, MAX_LEN)
        top_k = as_optional_int("top_k", top_k, 0, MAX_VOCAB)
        temperature, top_p = as_optional_number("temperature", temperature, 0.0, 100.0), \
            as_optional_number("top_p", top_p, 0.0, 1.0)
        as_bool("scores", scores)
        as_bool("control", control)
        g = self.config.generate
        pick = lambda value, default: default if value is None else value  # noqa: E731
        samples = generate(self.model, self.tokenizers.tgt, prompt, num, pick(max_len, g.max_len),
                           pick(temperature, g.temperature), pick(top_k, g.top_k), pick(top_p, g.top_p), seed,
                           self.device, control)
        return [(s.text, s.logprob) for s in samples] if scores else [s.text for s in samples]

    def evaluate(self, split: str = "test", beam: int | None = None, max_sentences: int = 0,
                 hard_negatives: str | None = None, source: str | None = None) -> dict:
        """The family's evaluation on a split (what `attnlab evaluate --json` prints): BLEU, chrF and BLEU by
        source length for translation, perplexity for a language model, accuracy for pairs, MSE for series. It
        is also written under RUN_DIR/eval/. source: a Bible translation run's English rendering to translate
        from ("kjv", "web"; None: the run's first `data.english`), trained on or not."""
        if split not in SPLITS:
            raise AttnlabError(f"unknown split {split!r:.40}; choose train, dev or test")
        beam = as_optional_int("beam", beam, 1, MAX_BEAM)
        max_sentences = as_int("max_sentences", max_sentences, 0, MAX_COUNT)
        hard_negatives = as_optional_text("hard_negatives", hard_negatives)
        source = as_optional_text("source", source)
        return evaluate_run(self.loaded, split, EvalOptions(beam, max_sentences, hard_negatives, source))

    @property
    def renderings(self) -> list[str]:
        """The English renderings a Bible translation run was trained on, the headline first ([] otherwise, and for
        an imported run: `attnlab.families.base.LoadedRun.renderings`)."""
        return self.loaded.renderings

    def format_eval(self, result: dict) -> str:
        """An evaluation result as the text `attnlab evaluate` prints."""
        return self.loaded.family.format_eval(result)

    def summary(self) -> str:
        """Per-layer output shapes and parameter counts (what `attnlab summary RUN_DIR` prints)."""
        return summary(self.path)

    def metrics(self) -> list[dict]:
        """The training log: one dict per logged step or validation (RUN_DIR/metrics.jsonl)."""
        return read_metrics(self.path)

    # ------------------------------------------------------------------ display
    def facts(self) -> dict:
        """What the run's card shows: family, parameters, steps, best dev score and the last evaluation."""
        records = self.metrics()
        steps = max((r["step"] for r in records), default=0)
        best = next((r for r in reversed(records) if r.get("improved")), {})  # the validation the best weights are
        shown = ("step", "dev_loss", "dev_ppl", "bleu", "chrf", "accuracy")
        return {"run": str(self.path), "family": self.loaded.family.title, "checkpoint": self.checkpoint,
                "parameters": count_parameters(self.model), "steps": steps, "device": str(self.device),
                "best_dev": {k: best[k] for k in shown if k in best}, "trained_on": self.renderings}

    def __repr__(self) -> str:
        return f"attnlab.Run({str(self.path)!r}, family={self.family!r}, checkpoint={self.checkpoint!r})"

    def _repr_html_(self) -> str:
        f = self.facts()
        best = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in f["best_dev"].items())
        rows = [("run", f["run"]), ("model", f["family"]), ("parameters", f"{f['parameters']:,}"),
                ("trained", f"{f['steps']:,} steps"), ("best dev", best or "not validated"),
                ("weights", f"{f['checkpoint']} checkpoint on {f['device']}")]
        if f["trained_on"]:
            rows.insert(2, ("English source", " + ".join(f["trained_on"])))
        body = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th>"
                       f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return f"<table class='attnlab-run'>{body}</table>"


def load(run_dir: Path | str, checkpoint: str = "best", device: str = "cpu", engine: str = "torch",
         model_dir: Path | str | None = None, decode_amp: str | None = None,
         decode_batch_size: int | None = None) -> Run:
    """A trained run directory of any family with its "best" or "last" weights, in eval mode on `device`
    ("cpu", "cuda", "mps" or "auto"). engine="ctranslate2": a Transformer translation run decodes with its
    CTranslate2 export (`model_dir`, or RUN_DIR's own, exported on first use). decode_amp ("none", "auto",
    "bf16"; None: the run's decode.amp): the precision of a translation run's search (translate, evaluate).
    decode_batch_size (None: the run's decode.batch_size; 0: by device, 64 on a CPU, 1,024 on a GPU): sentences
    per search batch, for this load only (a GPU decodes 1,024 at once about as fast as 64)."""
    run_dir, model_dir = as_path("run_dir", run_dir), as_optional_path("model_dir", model_dir)
    if checkpoint not in CHECKPOINTS:
        raise AttnlabError(f"checkpoint {checkpoint!r:.40} is not one of {', '.join(CHECKPOINTS)}")
    if not isinstance(device, str):
        raise AttnlabError(f"device must be a str such as 'cpu', 'cuda' or 'auto', not {type(device).__name__}")
    if engine not in ("torch", "ctranslate2"):
        raise AttnlabError(f"unknown engine {engine!r:.40}; choose torch or ctranslate2")
    loaded = load_run(run_dir, checkpoint, device)  # a folder that is no run: a clear error before any loading
    decode = {k: v for k, v in (("amp", decode_amp), ("batch_size", decode_batch_size)) if v is not None}
    if decode:
        if "translate" not in loaded.family.abilities:
            raise AttnlabError(f"{loaded.run_dir}: decode {' and '.join(decode).replace('_', ' ')} applies to "
                               "translation runs only")
        if decode_amp is not None and decode_amp not in DecodeConfig.CHOICES["amp"]:
            raise AttnlabError(f"decode amp {decode_amp!r} is not one of {', '.join(DecodeConfig.CHOICES['amp'])}")
        # the run's [decode] section with these keys over it, checked as a config file's would be (type, range)
        loaded.cfg.decode = from_dict(DecodeConfig, {**to_dict(loaded.cfg.decode), **decode}, prefix="decode.")
    return Run(loaded, engine, model_dir)


def train(config: Any, out: Path | str | None = None, *, resume: bool = False,
          overrides: Mapping[str, Any] | Sequence[str] | None = None, **kw: Any) -> Run:
    """Trains a config into a run directory and returns the run with its best weights.

    config: a config file, a packaged config's bare name ("demo", "bible-transformer-small"; see
    `attnlab.configs()`), a dict of config sections, a config object, or a `typed_config` result. Overrides as a
    dict of dotted keys ({"train.max_steps": 50}) or keywords with a double underscore for the dot
    (train__max_steps=50). out: the run directory (default runs/<config name>). resume=True continues the run in `out` (config None), where only
    its limits may change. Progress: a bar with loss and tokens/s (a notebook widget in Jupyter).
    """
    sets = override_list(overrides, **kw)
    out = as_optional_path("out", out)
    as_bool("resume", resume)
    if resume:
        if out is None:
            raise AttnlabError("resume=True needs out=, the run directory to continue")
        train_run(None, out, resume=True, overrides=sets)
        return load(out)
    if config is None:
        raise AttnlabError("a new run needs a config (a file, a packaged name such as 'demo', or a dict)")
    _, cfg, name = typed_config(config, sets)
    out = Path(out) if out is not None else Path("runs") / name
    state: TrainerState = train_run(cfg, out)
    log.debug("trained %s: %d steps", out, state.step)
    return load(out)


def corpus(source: str | Path | Mapping = "demo", *, overrides: Mapping[str, Any] | Sequence[str] | None = None,
           **kw: Any) -> Store:
    """The prepared corpus (`attnlab.data.store.Store`: `.pairs("train"|"dev"|"test")`, `.stats()`,
    `.tokenizers()`) of a translation config (a file, a packaged name or a dict), or of a data file
    (.tsv, .jsonl, optionally .gz/.xz/.bz2; dev and test held out at random) with the default settings.
    Prepared once and reused, exactly what `attnlab train` would use."""
    sets = override_list(overrides, **kw)
    if isinstance(source, (str, Path)) and _is_data_file(Path(source)):
        if not Path(source).is_file():
            raise AttnlabError(f"{source}: no such file")
        source = {"data": {"corpus": "files", "train": [str(source)]}}
    family, cfg, _ = typed_config(source, sets)
    if "translate" not in family.abilities:
        raise AttnlabError(f"a {family.title} config has no parallel corpus to prepare; give a translation config")
    return prepare_corpus(cfg)


def _is_data_file(path: Path) -> bool:
    suffixes = [s for s in path.suffixes if s not in COMPRESSED]
    return bool(suffixes) and suffixes[-1] in DATA_SUFFIXES


# ---------------------------------------------------------------------------------------------- show
def show(attention: Any, src_tokens: Sequence[str] | None = None, tgt_tokens: Sequence[str] | None = None, *,
         title: str = "attention", scheme: str | None = None, out: Path | str | None = None) -> Path | None:
    """Shows attention in the explorer (heatmap, model, head and neuron views), inline in a notebook, like
    bertviz's head_view: an `attnlab.Exploration` (from `run.explore`), or any attention you computed, shaped
    (R, C), (H, R, C), (L, H, R, C) or a Hugging Face tuple over layers of (1, H, R, C), with its source tokens
    (the columns) and target tokens (the rows; None: self-attention over src_tokens); scheme: how pieces join
    into words for the word toggle ("sentencepiece", "wordpiece", "char"; default: from the tokens). out: write
    the page as a standalone HTML file instead (returns its path); outside a notebook `out` is needed."""
    out, title = as_optional_path("out", out), as_text("title", title)
    if isinstance(attention, Recording):  # a run's exploration, or what a family's explore hook recorded
        ex = views.Exploration.of(attention)
    else:
        if src_tokens is None:
            raise AttnlabError("show(attention, src_tokens, tgt_tokens): give the tokens of the attention's columns")
        for i, t in enumerate(attention if isinstance(attention, (tuple, list)) else [attention]):
            if isinstance(t, torch.Tensor) and (t.is_meta or t.layout != torch.strided):
                where = "attention" if not isinstance(attention, (tuple, list)) else f"attention[{i}]"
                raise AttnlabError(f"{where} is a {'meta' if t.is_meta else str(t.layout)} tensor: give its values "
                                   "(a dense tensor on a real device, e.g. t.to_dense() or the model run on 'cpu')")
        # the tokens as given: views.token_list refuses one string (it would be split into characters)
        ex = views.attention_exploration(attention, src_tokens, tgt_tokens, title=title, scheme=scheme)
    if out is not None:
        out = Path(out)
        ex.save_html(out)
        return out
    if not in_notebook():
        raise AttnlabError("attnlab.show displays in a notebook; outside one give out='attention.html' to write "
                           "the page to a file")
    importlib.import_module("IPython.display").display(ex)
    return None
