"""Hugging Face `transformers` models in and out: `attnlab export RUN --to huggingface` writes a folder that
`transformers`' Auto classes load with no attnlab and no custom code, and `attnlab import SRC --out RUN_DIR` makes
an ordinary attnlab run of a `save_pretrained` folder (or a hub name). Nothing here imports `transformers`: the
folders are written and read with safetensors and JSON only, and nothing is unpickled (`attnlab.interop.hf_folder`).

A run's kind is its family row's `hf_kind` (`attnlab.families.base.Family`); one module per architecture does the
work:

| kind      | export (attnlab -> Hugging Face)                 | import (Hugging Face -> attnlab)            |
|-----------|--------------------------------------------------|---------------------------------------------|
| seq2seq   | MarianMTModel / Pegasus (`interop.marian`)       | MarianMTModel (`interop.marian`)            |
| causal-lm | GPT2LMHeadModel, BioGpt* (`interop.gpt2`)        | GPT2LMHeadModel, GPT2Model, BioGpt*         |
| encoder   | refused                                          | BertModel, BertFor* (`interop.bert`)        |

An architecture not in IMPORTS, and a run whose kind has no export, are refused with one line naming what is
supported; so is a setting the target class does not express (each module's `refusal`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import check_replaceable_folder
from attnlab.data.tokenizers import TokenizerConfig, TokenizerPair
from attnlab.families.base import LoadedRun
from attnlab.families.table import FAMILIES, titles
from attnlab.interop import bert, gpt2, marian
from attnlab.interop.hf_folder import (MANIFEST, architecture, load_state, read_config, source_folder,
                                       write_export, write_run)
from attnlab.interop.marian import LOAD_LINES  # noqa: F401  (re-exported: the lines that load a seq2seq export)

EXPORTERS: dict[str, Callable] = {"seq2seq": marian.export_seq2seq, "causal-lm": gpt2.export_causal_lm}
EXPORT_FILES = marian.EXPORT_FILES | gpt2.EXPORT_FILES | {MANIFEST}
_BERT = ("encoder", bert.import_bert)
IMPORTS: dict[str, tuple[str, Callable]] = {  # architecture -> (kind, reader)
    "MarianMTModel": ("seq2seq", marian.import_marian),
    "PegasusForConditionalGeneration": ("seq2seq", marian.import_marian),  # attnlab's pre-norm export comes back
    **{name: ("causal-lm", gpt2.import_causal_lm) for name in ("GPT2LMHeadModel", "GPT2Model", "BioGptForCausalLM")},
    **{name: _BERT for name in ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification",
                                "BertForTokenClassification", "BertForQuestionAnswering",
                                "BertForNextSentencePrediction", "BertForMultipleChoice")},
}
SUPPORTED = ("MarianMT (post-norm encoder-decoder, e.g. the OPUS-MT models), Pegasus with MarianTokenizer files "
             "(pre-norm, as attnlab exports a pre-norm run); GPT-2-class decoders (GPT2LMHeadModel, "
             "GPT2Model, BioGptForCausalLM with a tokenizer.json); BERT-class encoders (BertModel, BertForMaskedLM "
             "and the other BertFor* classes)")


def huggingface_dir(run_dir: Path | str, checkpoint: str = "best") -> Path:
    """Where a run's Hugging Face export goes by default: RUN_DIR/huggingface-<checkpoint>."""
    return Path(run_dir) / f"huggingface-{checkpoint}"


def export_huggingface(run: LoadedRun, out: Path | str | None = None, source: dict | None = None) -> Path:
    """Writes the Hugging Face folder of a loaded run to `out` (default `huggingface_dir`); returns it. Written
    like a checkpoint: every file atomically into a new private folder, which then replaces `out`; MANIFEST
    records `source` (what it was made from)."""
    if run.family.hf_kind not in EXPORTERS:
        can = titles([f for f in FAMILIES if f.hf_kind in EXPORTERS])
        raise AttnlabError(f"{run.run_dir}: a {run.family.title} run cannot be exported to Hugging Face; {can} runs "
                           "can")
    tensors, files = EXPORTERS[run.family.hf_kind](run)
    default = huggingface_dir(run.run_dir, run.checkpoint)
    out = Path(out) if out is not None else default
    check_replaceable_folder(out, EXPORT_FILES.__contains__, "part of a Hugging Face export",
                             None if out.resolve() == default.resolve() else MANIFEST)
    return write_export(out, tensors, files, source)


def import_huggingface(src: Path | str, out: Path | str) -> Path:
    """Makes the run directory `out` of a Hugging Face model (`source_folder`: a save_pretrained folder or a hub
    name) of an architecture in IMPORTS: config.json of the family whose row imports its kind, tokenizer/,
    checkpoints/ with the weights as step 0 (best and last), imported.json. An existing `out` is refused."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise AttnlabError(f"{out}: already exists; import into a new folder")
    folder = source_folder(src)
    hf = read_config(folder)
    arch = architecture(hf)
    if arch not in IMPORTS:
        raise AttnlabError(f"{folder}: architecture {arch} is not supported; attnlab imports {SUPPORTED}")
    kind, read = IMPORTS[arch]
    imported = read(folder, hf)
    family = next(f for f in FAMILIES if f.hf_kind == kind and f.hf_import is not None)
    raw = family.hf_import(imported.settings, imported.tokenizer_settings)
    pair = TokenizerPair(imported.tokenizer, imported.tokenizer, joint=True,
                         config=TokenizerConfig(**imported.tokenizer_settings))
    model = family.build_model(family.from_dict(raw), pair)
    load_state(model, imported.state, folder)
    return write_run(out, raw, pair, model, {"from": str(src), "architecture": arch, **imported.info})
