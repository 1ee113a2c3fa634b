"""The types a run is made of, shared by the family modules, the family table and the run pipeline: the family
row (`Family`) and its explorer hooks (`Explorer`, `ExplorerFacts`), a trained run loaded for use (`LoadedRun`) and
evaluation settings (`EvalOptions`).

They sit below the family modules (`translation`, `lm`, `pairs`, `series`) so those can name them without
importing the table (`attnlab.families.table`) or the pipeline (`attnlab.runs.workflow`) that stand on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from attnlab.core.config import from_dict
from attnlab.data.tokenizers import TokenizerPair
from attnlab.families.explorer import Recording
from attnlab.training.trainer import Training


@dataclass(frozen=True)
class EvalOptions:
    """Evaluation settings a family may use: beam (translation; None: the run's decode.beam_size),
    max_sentences (translation; 0: all), hard_negatives (pairs; None: the run's), source (translation on the
    Bible: the English rendering the source sentences are taken from, e.g. "web"; None: the run's headline, its
    first `data.english`)."""

    beam: int | None = None
    max_sentences: int = 0
    hard_negatives: str | None = None
    source: str | None = None


@dataclass
class LoadedRun:
    """A trained run ready to use: its family, typed config, tokenizers (None for families without a trained
    tokenizer), and the model with the chosen weights, in eval mode on `device`."""

    run_dir: Path
    family: Family
    cfg: Any
    tokenizers: TokenizerPair | None
    model: nn.Module
    checkpoint: str
    device: torch.device

    @property
    def renderings(self) -> list[str]:
        """The English renderings a Bible translation run was trained on, the headline first; [] for other runs
        and for a run `attnlab import` made (imported.json: trained elsewhere, its config's data section is only
        attnlab's default)."""
        data = getattr(self.cfg, "data", None)
        if "translate" not in self.family.abilities or data is None or (Path(self.run_dir) / "imported.json").is_file():
            return []
        return list(getattr(data, "renderings", []))


RunLoader = Callable[..., LoadedRun]  # `attnlab.runs.workflow.load_run`(run_dir, checkpoint, device, ability)


@dataclass(frozen=True)
class ExplorerFacts:
    """What the explorer says of a run before any input (`attnlab serve`'s GET /api/models, the attention column
    of `attnlab report`)."""

    model: str  # the model's name: the family's, or a pair run's model.family (decomposable, minilm)
    kind: str  # what the page asks for: "translation" (a sentence), "generation" (a prompt), "pair" (two sentences)
    attention: str  # e.g. "multi-head", "bahdanau", "causal self-attention"
    description: str  # the attention with its sizes, for tables: "multi-head (6 layers x 8 heads)", "luong (gru)"
    layers: int  # layers with attention (0: none)
    heads: int
    beam: int  # the run's default beam size (1: no beam search)
    max_tokens: int  # tokens an input may have (each sentence of a pair; a prompt with its continuation)


@dataclass(frozen=True)
class Explorer:
    """A family's explorer hooks (`attnlab serve`, `attnlab plot explore`, `Run.explore`).

    explore(run, sentence, sentence_b, beam, max_new, translator) -> `attnlab.families.explorer.Recording`: every
    attention map of one input; sentence is a translation's source, a language model's prompt or a pair's sentence
    a; sentence_b a pair's sentence b; beam a translation's beam size (None: the run's decode.beam_size); max_new
    the new tokens a language model generates at most; translator a ready `attnlab.decode.translate.Translator`
    of a translation run to decode with (None: one is made). Each family reads what its input is made of.
    facts(run) -> ExplorerFacts. tokens(run, sentence, sentence_b, max_new) -> the tokens one input costs per beam
    (the server's lanes), an AttnlabError when it has too many or misses a part.
    sentences: how many sentences an input is made of (2: a pair); empty_input: whether an empty sentence is an
    input (a language model generates from nothing).
    """

    explore: Callable[[LoadedRun, str, str | None, int | None, int, Any], Recording]
    facts: Callable[[LoadedRun], ExplorerFacts]
    tokens: Callable[[LoadedRun, str, str | None, int], int]
    sentences: int = 1
    empty_input: bool = False


def model_family(raw: Any) -> Any:
    """The model.family of a raw config dict (a file's, or RUN_DIR/config.json's); None where it has none."""
    model = raw.get("model") if isinstance(raw, dict) else None
    return model.get("family") if isinstance(model, dict) else None


@dataclass(frozen=True)
class Family:
    """One model family. Every callable takes the family's typed config first.

    recognise(raw dict) -> bool; load_data(cfg, tokenizers | None) -> data (a resumed run hands in its
    tokenizers);
    make_tokenizers(cfg, data) -> TokenizerPair | None (trained for a new run, saved in RUN_DIR/tokenizer);
    build_model(cfg, tokenizers | None) -> model (None: the sizes of the config, for `attnlab summary`);
    complete(raw dict) -> raw dict (optional; a new run only: its raw config completed from elsewhere before it is
    typed, e.g. a translation config's pretrained.init brings that run's model and tokenizer sections);
    initialise(cfg, model, load_run) (optional; a new run only: weights from elsewhere, e.g. another run loaded
    with `load_run(run_dir, checkpoint, device, ability)`, which the pipeline hands in); training(cfg, data, tokenizers,
    model) -> Training; evaluate(LoadedRun, split, EvalOptions) -> result dict (it writes RUN_DIR/eval/...);
    format_eval(result) -> text; summary_inputs(cfg, tokenizers | None, src_len, tgt_len) -> (inputs, description);
    uses_tokenizers(cfg) -> whether a run of cfg has RUN_DIR/tokenizer (`load_run` refuses one without it);
    prepare(cfg, out | None, force) -> Store (optional: the family reads its corpus through a prepared store,
    `attnlab data prepare`; None: it does not).

    What a family can do beyond the pipeline, asked of the row and never of its name: abilities (the commands its
    runs serve: "translate", "generate", "classify", "regress"); explorer (its `Explorer` hooks; None: its runs
    have no attention to explore); export (the CTranslate2 model its runs export to, `attnlab.interop.ctranslate2`:
    "translator" an encoder-decoder, "generator" a decoder-only language model; None: no export); hf_kind (the
    kind of Hugging Face model its runs are, `attnlab.interop.huggingface`: "seq2seq" an encoder-decoder (exported
    as MarianMT when post-norm, Pegasus when pre-norm), "causal-lm" a decoder-only LM (GPT-2, BioGPT), "encoder" a
    BERT-class encoder (imported only); None: neither exported nor imported); hf_import(model settings, tokenizer
    settings) -> the raw RUN_DIR/config.json of a run imported from a Hugging Face model of its kind (`attnlab
    import`; None: its kind is not imported).
    """

    name: str
    title: str
    config_class: type
    recognise: Callable[[dict], bool]
    load_data: Callable[[Any, TokenizerPair | None], Any]
    make_tokenizers: Callable[[Any, Any], TokenizerPair | None]
    build_model: Callable[[Any, TokenizerPair | None], nn.Module]
    training: Callable[[Any, Any, TokenizerPair | None, nn.Module], Training]
    evaluate: Callable[[LoadedRun, str, EvalOptions], dict]
    format_eval: Callable[[dict], str]
    summary_inputs: Callable[[Any, TokenizerPair | None, int, int], tuple[tuple, str]]
    abilities: frozenset[str]
    initialise: Callable[[Any, nn.Module, RunLoader], None] | None = None
    complete: Callable[[dict], dict] | None = None
    uses_tokenizers: Callable[[Any], bool] = lambda cfg: True
    explorer: Explorer | None = None
    export: str | None = None
    hf_kind: str | None = None
    hf_import: Callable[[dict, dict], dict] | None = None
    prepare: Callable[[Any, Path | None, bool], Any] | None = None

    def from_dict(self, data: dict) -> Any:
        """The typed config of a raw dict (RUN_DIR/config.json plus overrides), validated key by key."""
        return from_dict(self.config_class, data)

    def new_config(self, data: dict) -> Any:
        """The typed config of a new run's raw dict (a file's, a dict or a config object, overrides applied):
        `complete`d first, then validated key by key (a stored RUN_DIR/config.json is complete: `from_dict`)."""
        return from_dict(self.config_class, self.complete(data) if self.complete is not None else data)
