"""The types a run is made of, shared by the family modules, the family table and the run pipeline: the family
row (`Family`), a trained run loaded for use (`LoadedRun`) and evaluation settings (`EvalOptions`).

They sit below the family modules (`experiment`, `lm`, `pairs`, `series`) so those can name them without
importing the table (`attnlab.families.table`) or the pipeline (`attnlab.app.workflow`) that stand on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from attnlab.core.config import from_dict
from attnlab.data.tokenizers import TokenizerPair
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


RunLoader = Callable[..., LoadedRun]  # `attnlab.app.workflow.load_run`(run_dir, checkpoint, device, ability)


@dataclass(frozen=True)
class Family:
    """One model family. Every callable takes the family's typed config first.

    load_config(path, overrides) -> cfg; recognise(raw dict) -> bool; load_data(cfg, tokenizers | None) -> data (a resumed run hands in its
    tokenizers);
    make_tokenizers(cfg, data) -> TokenizerPair | None (trained for a new run, saved in RUN_DIR/tokenizer);
    build_model(cfg, tokenizers | None) -> model (None: the sizes of the config, for `attnlab summary`);
    initialise(cfg, model, load_run) (optional; a new run only: weights from elsewhere, e.g. another run loaded
    with `load_run(run_dir, checkpoint, device, ability)`, which the pipeline hands in); training(cfg, data, tokenizers,
    model) -> Training; evaluate(LoadedRun, split, EvalOptions) -> result dict (it writes RUN_DIR/eval/...);
    format_eval(result) -> text; summary_inputs(cfg, tokenizers | None, src_len, tgt_len) -> (inputs, description);
    uses_tokenizers(cfg) -> whether a run of cfg has RUN_DIR/tokenizer (`load_run` refuses one without it).
    """

    name: str
    title: str
    config_class: type
    recognise: Callable[[dict], bool]
    load_config: Callable[[Path | str | None, list[str] | None], Any]
    load_data: Callable[[Any, TokenizerPair | None], Any]
    make_tokenizers: Callable[[Any, Any], TokenizerPair | None]
    build_model: Callable[[Any, TokenizerPair | None], nn.Module]
    training: Callable[[Any, Any, TokenizerPair | None, nn.Module], Training]
    evaluate: Callable[[LoadedRun, str, EvalOptions], dict]
    format_eval: Callable[[dict], str]
    summary_inputs: Callable[[Any, TokenizerPair | None, int, int], tuple[tuple, str]]
    abilities: frozenset[str]
    initialise: Callable[[Any, nn.Module, RunLoader], None] | None = None
    uses_tokenizers: Callable[[Any], bool] = lambda cfg: True

    def from_dict(self, data: dict) -> Any:
        """The typed config of a raw dict (RUN_DIR/config.json plus overrides), validated key by key."""
        return from_dict(self.config_class, data)
