"""The `attnlab` command line. Every user mistake ends as one line on stderr and exit code 2.

The CLI prints results to stdout; library code logs progress and messages to stderr (`attnlab.core.logs`). The
commands (`attnlab.app.commands`) call the Python API (`attnlab.app.api`) and nothing else of attnlab; this module
imports the commands, the API's names and limits for its grammar, and `attnlab.core` (import-linter's contract "the
command line goes through the API", pyproject.toml).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import platform
import signal
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

import torch

from attnlab.app.commands import (cmd_average, cmd_configs, cmd_data, cmd_data_paraphrase, cmd_data_prepare,
                                  cmd_demo, cmd_evaluate, cmd_export, cmd_generate, cmd_import, cmd_paraphrase_plot,
                                  cmd_plot_attention, cmd_plot_explore, cmd_plot_runs,
                                  cmd_pretrained, cmd_report, cmd_series, cmd_serve, cmd_summary,
                                  cmd_train, cmd_translate)
from attnlab.app.api import (ENGLISH_MODULES, MAX_CHARS, MAX_CONNECTIONS, MAX_PROCS, MAX_SEEDS, MAX_SUMMARY_LEN,
                             SERIES_VARIANTS, DecodeConfig, cache_dir)
from attnlab.core.config import MAX_BEAM, MAX_COUNT, MAX_LAYERS, MAX_LEN, MAX_SAMPLES, MAX_SEED, MAX_VOCAB
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, make_dirs
from attnlab.core.logs import setup_logging
from attnlab.core.plotting import supported_formats

DEVICES = ("auto", "cpu", "cuda", "mps")
NESTED_COMMANDS = ("data", "paraphrase", "plot")  # commands with sub-commands of their own
# The numeric options' limits are config.py's (a config key's) or the API's (MAX_SUMMARY_LEN, MAX_CHARS, ...), which
# checks the same arguments from Python.
# Set (to anything but "" or "0") to let an unexpected exception propagate with its traceback instead of the
# one-line internal error: the test suite sets it so that every internal error fails the test that caused it.
RAISE_INTERNAL = "ATTNLAB_RAISE_INTERNAL"


# ---------------------------------------------------------------------------------------------- data
def _add_tokenizer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", choices=("unigram", "bpe", "char", "none"), default="unigram",
                   help="tokenizer to train on the train split for the token statistics (default: unigram)")
    p.add_argument("--vocab-size", type=_int(1, MAX_VOCAB), default=8000,
                   help="subword vocabulary size (default: 8000)")
    p.add_argument("--separate-vocab", action="store_true",
                   help="separate source and target vocabularies (default: one joint vocabulary)")
    p.add_argument("--save-tokenizer", type=Path, metavar="DIR", help="save the trained tokenizer to DIR")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")


def _number(kind: type, lo: float, hi: float):
    """An argparse type: a number of `kind` (int or float) in [lo, hi]. Anything else (a word, 1e400, nan, a
    number past the limit) is argparse's usage error naming the option and the limit, exit code 2."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {noun}") from None
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value!r} exceeds the limit {hi!r}")
        if not value >= lo:  # nan too
            raise argparse.ArgumentTypeError(f"{value!r} is below the minimum {lo!r}" if value < lo else
                                             f"{value!r} is not {noun} in [{lo!r}, {hi!r}]")
        return value

    parse.__name__ = kind.__name__  # argparse's fallback message names the type by it
    parse.limits = (lo, hi)  # for the tests, which fuzz every numeric option at and past its limits
    return parse


def _int(lo: int, hi: int):
    return _number(int, lo, hi)


def _float(lo: float, hi: float):
    return _number(float, lo, hi)


def _formats(text: str) -> list[str]:
    """An argparse type: comma-separated image formats matplotlib writes (png,svg)."""
    formats = [f.strip().lower() for f in text.split(",")]
    supported = supported_formats()
    for f in formats:
        if f not in supported:
            raise argparse.ArgumentTypeError(f"{f!r} is not a format matplotlib writes; choose from "
                                             f"{', '.join(supported)}")
    return formats


def _option_groups() -> dict[str, argparse.ArgumentParser]:
    """The options several commands share, defined once (argparse parent parsers)."""
    def device_group(default: str) -> argparse.ArgumentParser:
        # a group of its own per default: argparse's parents share their action objects, so a child's
        # set_defaults(device=...) would change the default of every command built from the same parent (it made
        # `attnlab evaluate` decode on the CPU beside a GPU, 10x slower: docs/results.md, "GPU")
        group = argparse.ArgumentParser(add_help=False)
        group.add_argument("--device", choices=DEVICES, default=default,
                           help="where the model runs (default: " + ("auto = a GPU if there is one)" if default ==
                                                                     "auto" else f"{default})"))
        return group

    device, device_cpu = device_group("auto"), device_group("cpu")
    checkpoint = argparse.ArgumentParser(add_help=False)
    checkpoint.add_argument("--checkpoint", choices=("best", "last"), default="best",
                            help="which weights of the run (default best)")
    overrides = argparse.ArgumentParser(add_help=False)
    overrides.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="override a config key, e.g. --set train.max_steps=200 (repeatable)")
    train = argparse.ArgumentParser(add_help=False, parents=[overrides])
    train.add_argument("config", nargs="?", type=Path, help="config file (.toml/.yaml/.json) or a packaged config's "
                       "name (demo, bible-transformer-small, ...: `attnlab configs`); with --resume: RUN_DIR")
    train.add_argument("--out", type=Path, metavar="RUN_DIR", help="run directory (default: runs/<config name>)")
    train.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR where it stopped (only "
                       "its limits may change with --set)")
    train.add_argument("--procs", type=_int(1, MAX_PROCS), default=1, metavar="N",
                       help="N data-parallel training processes on this machine (torchrun; gloo on the CPU, a GPU "
                            "each with CUDA), the cores split among them; the same update as one process "
                            "(default 1)")
    run = argparse.ArgumentParser(add_help=False, parents=[checkpoint, device])
    run.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    run_cpu = argparse.ArgumentParser(add_help=False, parents=[checkpoint, device_cpu])
    run_cpu.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    amp = argparse.ArgumentParser(add_help=False)  # translate and evaluate
    amp.add_argument("--amp", choices=DecodeConfig.CHOICES["amp"], default=None,
                     help="translation: the precision of the search: none (fp32), auto (bf16 where the device "
                          "computes it natively), bf16 (default: the run's decode.amp, none unless set)")
    amp.add_argument("--batch-size", type=_int(*DecodeConfig.LIMITS["batch_size"]), default=None, metavar="N",
                     help="translation: sentences per search batch (default: the run's decode.batch_size; 0 or "
                          "unset: by device, 64 on a CPU, 1024 on a GPU)")
    evaluate = argparse.ArgumentParser(add_help=False, parents=[run])
    evaluate.add_argument("--split", choices=("train", "dev", "test"), default="test")
    evaluate.add_argument("--json", action="store_true", help="print the result as JSON")
    return {"device": device, "device_cpu": device_cpu, "checkpoint": checkpoint, "overrides": overrides,
            "train": train, "run": run, "run_cpu": run_cpu, "evaluate": evaluate, "amp": amp}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab", description="Attention-based sequence models: build corpora, train, decode, look inside.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__import__('attnlab').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    opts = _option_groups()

    data = sub.add_parser("data", help="build or check a parallel corpus and print its statistics",
                          description="Build or check a parallel corpus and print its statistics.")
    dsub = data.add_subparsers(dest="source", metavar="SOURCE", required=True)
    bible = dsub.add_parser("bible", help="English (KJV) -> Spanish (RV 1909) Bible from Debian's SWORD modules")
    bible.add_argument("--english", choices=ENGLISH_MODULES, default="kjv",
                       help="English source: King James (kjv) or World English Bible (web)")
    bible.add_argument("--refresh", action="store_true", help="rebuild the cached corpus")
    bible.add_argument("--export", type=Path, metavar="DIR", help="write train/dev/test TSV files to DIR")
    tsv = dsub.add_parser("tsv", help="a source<TAB>target file")
    tsv.add_argument("file", type=Path)
    files = dsub.add_parser("files", help="two line-aligned plain files")
    files.add_argument("src", type=Path)
    files.add_argument("tgt", type=Path)
    tsv.add_argument("--dev", type=Path, help="dev split as TSV (default: held out of FILE)")
    tsv.add_argument("--test", type=Path, help="test split as TSV (default: held out of FILE)")
    for p in (tsv, files):
        p.add_argument("--dev-size", type=_int(0, MAX_COUNT), default=500, help="pairs held out for dev (default: 500)")
        p.add_argument("--test-size", type=_int(0, MAX_COUNT), default=500,
                       help="pairs held out for test (default: 500)")
    para = dsub.add_parser("paraphrase", help="KJV vs WEB verse pairs for paraphrase identification",
                           description="Pairs of English renderings of Bible verses, KJV (a) vs World English "
                                       "Bible (b): label 1 = same verse, 0 = another verse of the same chapter "
                                       "(hard) or of another chapter (easy); balanced, split by book.")
    para.add_argument("--seed", type=_int(0, MAX_SEED), default=0, help="seed of the negative pairs (default 0)")
    para.add_argument("--refresh", action="store_true", help="re-read the SWORD modules (rebuild the cache)")
    para.add_argument("--hard-negatives", choices=("random", "overlap"), default="random",
                      help="hard negatives: a random verse of the chapter (default), or the one sharing the most "
                           "words with a")
    para.add_argument("--export", type=Path, metavar="DIR", help="write train/dev/test TSV files to DIR")
    para.add_argument("--json", action="store_true", help="print the statistics as JSON")
    para.set_defaults(func=cmd_data_paraphrase)
    for p in (bible, tsv, files):
        _add_tokenizer_args(p)
        p.set_defaults(func=cmd_data)
    prep = dsub.add_parser(
        "prepare", parents=[opts["overrides"]], help="prepare a translation config's corpus once: filtered, tokenized "
        "and written to a token-id store (what `attnlab train` does on first use)",
        description="Prepare the corpus of a translation config once: read it as a stream (TSV, JSON lines or two "
                    "aligned files, plain or .gz/.xz/.bz2), hold out dev/test, apply the training filters "
                    "(data.max_words, data.max_ratio, data.dedup, data.max_train_pairs), train the tokenizer on a "
                    "bounded sample (tokenizer.sample_sentences), encode on every core and write the token ids to a "
                    "store on disk (.bin + .idx) keyed by the inputs. Training, resuming and other configs with the same "
                    "data reuse it; a changed input file or setting builds a new one.")
    prep.add_argument("config", type=Path, help="a translation config (.toml/.yaml/.json)")
    prep.add_argument("--out", type=Path, metavar="DIR", help="the store's folder (default: the cache, "
                      "$ATTNLAB_CACHE/stores/NAME-KEY); train from it with --set data.store=DIR")
    prep.add_argument("--force", action="store_true", help="build it again even if it is there (a damaged store)")
    prep.add_argument("--json", action="store_true", help="print the statistics as JSON")
    prep.set_defaults(func=cmd_data_prepare)

    cfgs = sub.add_parser("configs", help="list the packaged configs, print one, or copy one out to edit",
                          description="The configs that ship with attnlab (the recipes of the README and docs). "
                                      "Any command that takes a config takes one of these names too: attnlab "
                                      "train demo, attnlab train bible-transformer-small.")
    cfgs.add_argument("name", nargs="?", metavar="NAME", help="a packaged config (default: list them all)")
    cfgs.add_argument("--copy", nargs="?", const=".", metavar="DEST",
                      help="copy the config to DEST (a file, or a folder; default: the current folder)")
    cfgs.set_defaults(func=cmd_configs)

    pre = sub.add_parser("pretrained", help="list the trained models that ship with attnlab, with their test BLEU",
                         description="The trained models that ship with attnlab (no training needed). Use one as "
                                     "pretrained:NAME wherever a run directory goes: attnlab translate "
                                     "pretrained:bahdanau, attnlab serve --pretrained, attnlab.load("
                                     "'pretrained:transformer'). Each has a model card: attnlab pretrained NAME.")
    pre.add_argument("name", nargs="?", metavar="NAME", help="print this model's card")
    pre.add_argument("--json", action="store_true", help="print the list as JSON")
    pre.set_defaults(func=cmd_pretrained)
    train = sub.add_parser("train", parents=[opts["train"]],
                           help="train any model family from a TOML/YAML config, or resume a run",
                           description="Train a model: the config's model.family (rnn, transformer, lm, "
                                       "decomposable, minilm) or its [series] table picks the family. Any config "
                                       "key can be overridden with --set, e.g. --set train.max_steps=200 "
                                       "--set model.rnn.cell=lstm. --init RUN_DIR fine-tunes a translation run.")
    train.add_argument("--init", type=Path, metavar="RUN_DIR",
                       help="fine-tune a translation run (a trained one, or a MarianMT model `attnlab import` made): "
                            "its model, tokenizers and weights, the config's data, train and decode settings "
                            "(= --set pretrained.init=RUN_DIR; the config's model and tokenizer sections may be "
                            "left out)")
    train.set_defaults(func=cmd_train)

    para = sub.add_parser("paraphrase", help="Bible verse paraphrase identification: train, evaluate, plot",
                          description="Sentence-pair classifiers on KJV-vs-WEB verse pairs (see `attnlab data "
                                      "paraphrase`): decomposable attention (Parikh et al. 2016) or the fine-tuned "
                                      "all-MiniLM-L6-v2 encoder, chosen by the config's model.family. train and "
                                      "evaluate are `attnlab train` / `attnlab evaluate` for these runs.")
    psub_para = para.add_subparsers(dest="action", metavar="ACTION", required=True)
    ptrain = psub_para.add_parser("train", parents=[opts["train"]],
                                  help="the same as `attnlab train`, for a pair config (configs/paraphrase-*.toml)",
                                  description="The same as `attnlab train` (the one trainer; model selection on dev "
                                              "accuracy), refusing a config that is not a sentence-pair one.")
    ptrain.set_defaults(func=cmd_train, require_ability="classify")
    peval = psub_para.add_parser("evaluate", parents=[opts["evaluate"]],
                                 help="accuracy on a split, overall and by kind of negative",
                                 description="The same as `attnlab evaluate`, for a pair run: accuracy on a split, "
                                             "overall, on the positives, the hard (same chapter) and the easy (other "
                                             "chapter) negatives; writes RUN_DIR/eval/paraphrase_<split>.json and "
                                             "the misclassified pairs.")
    peval.add_argument("--hard-negatives", choices=("random", "overlap"),
                       help="evaluate on these hard negatives instead of the run's: random (a random verse of the "
                            "chapter) or overlap (the verse of the chapter sharing the most words with a)")
    peval.set_defaults(func=cmd_evaluate)
    pplot = psub_para.add_parser("plot", parents=[opts["run_cpu"]],
                                 help="heatmaps of the soft alignment of one pair (decomposable)",
                                 description="The soft alignment matrix of a pair: rows = tokens of a, columns = "
                                             "tokens of b; OUT.png (each row a softmax over b) and OUT_b.png (each "
                                             "column a softmax over a).")
    pplot.add_argument("--a", required=True, help="sentence a (e.g. a KJV verse)")
    pplot.add_argument("--b", required=True, help="sentence b (e.g. a WEB verse)")
    pplot.add_argument("--out", type=Path, help="output path without suffix (default RUN_DIR/plots/alignment)")
    pplot.add_argument("--formats", type=_formats, default="png,svg", help="comma-separated formats (default png,svg)")
    pplot.set_defaults(func=cmd_paraphrase_plot)

    tr = sub.add_parser("translate", parents=[opts["run"], opts["amp"]],
                        help="translate text with a trained run (stdin to stdout, or files)",
                        description="Translate text with a trained run, one sentence a line. The input FILE may "
                                    "stand before or after the options.")
    tr.add_argument("input", nargs="?", type=Path, metavar="FILE",
                    help="input file, one sentence a line (default or -: stdin; typed at a terminal, each "
                         "line is answered when entered)")
    tr.add_argument("--beam", type=_int(1, MAX_BEAM), default=None,
                    help="beam size; 1 = greedy (default: the run's config)")
    tr.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    tr.add_argument("--n-best", type=_int(1, MAX_BEAM), default=1, help="print the N best (line, score, text)")
    tr.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch",
                    help="decode with attnlab's PyTorch search (default) or a CTranslate2 export of the run")
    tr.add_argument("--ct2-model", type=Path, metavar="DIR",
                    help="the CTranslate2 model to use (default: RUN_DIR/ctranslate2-<checkpoint>-float32, exported "
                         "on first use)")
    tr.set_defaults(func=cmd_translate)

    ex = sub.add_parser("export", parents=[opts["checkpoint"]],
                        help="export a Transformer run to CTranslate2 (an inference engine, int8 on CPU) or Hugging "
                             "Face transformers",
                        description="--to ctranslate2 (default): write a standard CTranslate2 model directory of a "
                                    "Transformer translation run (ctranslate2.Translator loads it without attnlab; "
                                    "`attnlab translate --engine ctranslate2 --ct2-model DIR` uses it with the "
                                    "run's tokenizer) or of a decoder-only language-model run (for "
                                    "ctranslate2.Generator); RNN runs are refused: CTranslate2 has no RNN models. "
                                    "--to huggingface: write a folder that transformers' "
                                    "AutoModelForSeq2SeqLM.from_pretrained and AutoTokenizer.from_pretrained load "
                                    "with no attnlab (post-norm: MarianMT, pre-norm: Pegasus; MarianTokenizer "
                                    "files, a model card); a language-model run becomes a causal LM for "
                                    "AutoModelForCausalLM (GPT2LMHeadModel, or BioGptForCausalLM for tied, scaled "
                                    "embeddings); a setting no class expresses is refused, naming it. --to attnlab: "
                                    "a compact run of any family (`attnlab pretrained` models are such runs).")
    ex.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    ex.add_argument("--to", choices=("ctranslate2", "huggingface", "attnlab"), default="ctranslate2",
                    help="the target format (default ctranslate2; attnlab: a compact run of any family, weights "
                         "float32, bfloat16 or int8 with a scale per row, no training state, a model card)")
    ex.add_argument("--quantization", default="float32",
                    choices=("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16",
                             "int8_bfloat16"), help="weight type (default float32; int8 for fast CPU decoding)")
    ex.add_argument("--out", type=Path, metavar="DIR", help="default: RUN_DIR/ctranslate2-<checkpoint>-<quantization>, "
                    "RUN_DIR/huggingface-<checkpoint>, or RUN_DIR-<quantization> beside the run (--to attnlab)")
    ex.set_defaults(func=cmd_export)

    avg = sub.add_parser("average", help="average the weights of a run's last N checkpoints (Vaswani et al. 2017)",
                         description="Write a compact float32 run whose weights are the element-wise mean of the "
                                     "run's N newest checkpoints, as Vaswani et al. (2017) averaged their last 5; "
                                     "every command loads it like the run. The run keeps train.keep_last "
                                     "checkpoints (default 2): train with --set train.keep_last=N to average N.")
    avg.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    avg.add_argument("--last", type=_int(1, 1000), default=5, metavar="N",
                     help="how many of the newest checkpoints (default 5)")
    avg.add_argument("--out", type=Path, metavar="DIR", help="default: RUN_DIR-avgN beside the run")
    avg.set_defaults(func=cmd_average)

    im = sub.add_parser("import", help="make a run directory of a Hugging Face model (MarianMT, GPT-2, BERT)",
                        description="Read a Hugging Face model (a transformers save_pretrained folder with "
                                    "model.safetensors and its tokenizer files; or a hub name such as "
                                    "Helsinki-NLP/opus-mt-en-es, fetched with huggingface_hub when you have "
                                    "internet) into an ordinary run directory. MarianMT (e.g. OPUS-MT): a "
                                    "translation run (translate, evaluate, plot, serve, export, train --init). "
                                    "GPT2LMHeadModel (GPT2Model; BioGptForCausalLM with a tokenizer.json): a "
                                    "language-model run (generate, serve, export). BertModel or "
                                    "a BertFor* class: a BERT-class encoder run to explore (serve, plot explore; a "
                                    "sentence or a pair), its heads left out. Safetensors and JSON only: pickled "
                                    "weights (pytorch_model.bin) are refused, never loaded. Other architectures are "
                                    "refused, naming the supported ones.")
    im.add_argument("src", metavar="SRC", help="a save_pretrained folder, or a hub name (needs internet)")
    im.add_argument("--out", type=Path, metavar="RUN_DIR", required=True, help="the new run directory")
    im.set_defaults(func=cmd_import)

    ev = sub.add_parser("evaluate", parents=[opts["evaluate"], opts["amp"]],
                        help="evaluate a trained run of any family on a split",
                        description="Evaluate a trained run on a split, as its family measures it: translation "
                                    "BLEU/chrF and BLEU by sentence length; language model perplexity; pair "
                                    "classifier accuracy; series MSE. Writes RUN_DIR/eval/.")
    ev.add_argument("--beam", type=_int(1, MAX_BEAM), default=None,
                    help="translation: beam size; 1 = greedy (default: the run's)")
    ev.add_argument("--max-sentences", type=_int(0, MAX_COUNT), default=0,
                    help="translation: only the first N sentences (0: all)")
    ev.add_argument("--source", choices=ENGLISH_MODULES, default=None,
                    help="Bible translation: translate the split from this English rendering (kjv: King James, "
                         "web: World English Bible), whether the run was trained on it or not; writes "
                         "eval/SPLIT.SOURCE.json unless it is the run's first data.english (default: each rendering "
                         "the run was trained on; --json then prints a list when there are several)")
    ev.set_defaults(func=cmd_evaluate)

    gen = sub.add_parser("generate", parents=[opts["run"]],
                         help="sample text from a trained language model (decoder-only Transformer)",
                         description="Sample text from a trained language-model run (configs/*-lm.toml): "
                                     "temperature, top-k and top-p (nucleus) sampling with a key/value cache. "
                                     "Defaults come from the run's [generate] section.")
    gen.add_argument("--prompt", action="append", metavar="TEXT",
                     help="text to continue (repeatable; default: sample from the start of a sentence)")
    gen.add_argument("-n", "--num", type=_int(1, MAX_SAMPLES), default=3, help="samples per prompt (default 3)")
    gen.add_argument("--control", action="store_true",
                     help="let the model generate the tokenizer's control pieces (newlines, tabs; e.g. GPT-2's Ċ), "
                          "which are never generated by default so that each sample is one line; the samples are "
                          "then printed as generated, a blank line after each")
    gen.add_argument("--max-len", type=_int(1, MAX_LEN), default=None, help="new tokens at most per sample")
    gen.add_argument("--temperature", type=_float(0.0, 100.0), default=None, help="softmax temperature; 0 = greedy")
    gen.add_argument("--top-k", type=_int(0, MAX_VOCAB), default=None,
                     help="sample among the k most likely tokens (0: all)")
    gen.add_argument("--top-p", type=_float(0.0, 1.0), default=None,
                     help="nucleus sampling: smallest set with probability p")
    gen.add_argument("--seed", type=_int(0, MAX_SEED), default=0, help="random seed (default 0)")
    gen.add_argument("--scores", action="store_true", help="print each sample's log-probability before it")
    gen.set_defaults(func=cmd_generate)

    plot = sub.add_parser("plot", help="plots: attention heatmaps, training curves, BLEU by sentence length",
                          description="Plots of trained models (PNG/SVG via matplotlib).")
    psub = plot.add_subparsers(dest="what", metavar="WHAT", required=True)
    patt = psub.add_parser("attention", parents=[opts["run"]],
                           help="cross-attention heatmap (source x output tokens) of one sentence")
    patt.add_argument("--sentence", required=True, help="the source sentence to translate and plot")
    patt.add_argument("--beam", type=_int(1, MAX_BEAM), default=1, help="beam size for the translation (default 1)")
    patt.add_argument("--out", type=Path, help="output path without suffix (default RUN_DIR/plots/attention)")
    patt.add_argument("--formats", type=_formats, default="png,svg", help="comma-separated formats (default png,svg)")
    patt.add_argument("--layer", default="-1", help="Transformer: decoder layer 1..N, -1 = last (default), or all")
    patt.add_argument("--head", default="all", help="Transformer: head 1..H, or all (default: a grid of heads)")
    patt.set_defaults(func=cmd_plot_attention)

    pexp = psub.add_parser("explore", parents=[opts["run"]],
                           help="every attention of one input, as the explorer's views (heatmap, model, head, "
                                "neuron view) in files",
                           description="The views of `attnlab serve`'s explorer for one input, as PNG/SVG files "
                                       "OUT/<map>_<view>.<format>: translation runs (maps cross, enc_self, "
                                       "enc_self_rollout, dec_self; RNN: align), language models (lm_self, "
                                       "lm_self_rollout: --sentence is the prompt), sentence pairs (a_to_b, "
                                       "b_to_a, ...; MiniLM: a_self, b_self). Prints the paths; the n-best list "
                                       "and each token's probability with its top 5 go to stderr.")
    pexp.add_argument("--sentence", required=True, help="the source sentence, the prompt, or sentence a of a pair")
    pexp.add_argument("--sentence-b", help="sentence b (sentence-pair runs)")
    pexp.add_argument("--beam", type=_int(1, MAX_BEAM), default=None,
                      help="translation: beam size (default: the run's)")
    pexp.add_argument("--max-new", type=_int(1, MAX_LEN), default=40,
                      help="language model: new tokens at most (default 40)")
    pexp.add_argument("--map", help="comma-separated maps (default: all of the run)")
    pexp.add_argument("--view", default="heatmap,model,head,neuron",
                      help="comma-separated views: heatmap, model, head, neuron (default: all)")
    pexp.add_argument("--layer", type=_int(-MAX_LAYERS, MAX_LAYERS), default=-1,
                      help="layer of the heatmap, head and neuron views (1..N, -1 = last, default)")
    pexp.add_argument("--head", default="mean", help="head number from 1, or mean (default; the neuron view: 1)")
    pexp.add_argument("--query", type=_int(1, MAX_LEN), default=None,
                      help="neuron view: the query token, from 1 (default: the last of a causal map such as "
                           "decoder self-attention, whose first sees one key, else 1)")
    pexp.add_argument("--words", action="store_true", help="merge subword pieces into words")
    pexp.add_argument("--out", type=Path, help="output directory (default RUN_DIR/plots/explore)")
    pexp.add_argument("--formats", type=_formats, default="png", help="comma-separated formats (default png)")
    pexp.set_defaults(func=cmd_plot_explore)

    pcur = psub.add_parser("curves", help="training curves (train loss, dev loss, dev BLEU) of runs on one figure")
    pbl = psub.add_parser("bleu-by-length", help="BLEU by source length of evaluated runs on one figure "
                                                  "(run `attnlab evaluate` first)")
    pbl.add_argument("--split", choices=("train", "dev", "test"), default="test")
    for p in (pcur, pbl):
        p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
        p.add_argument("--out", type=Path, help="output file (.png/.svg/.pdf; default under runs/plots/)")
        p.set_defaults(func=cmd_plot_runs)

    summ = sub.add_parser("summary", parents=[opts["overrides"]],
                          help="per-layer output shapes and parameter counts of a config or run (any family)",
                          description="Per-layer output shapes and parameter counts (like Keras' model.summary()), "
                                      "from one forward pass on a dummy batch.")
    summ.add_argument("target", type=Path, metavar="CONFIG_OR_RUN")
    summ.add_argument("--src-len", type=_int(1, MAX_SUMMARY_LEN), default=7, help="dummy source length (default 7)")
    summ.add_argument("--tgt-len", type=_int(1, MAX_SUMMARY_LEN), default=6, help="dummy target length (default 6)")
    summ.set_defaults(func=cmd_summary)

    rep = sub.add_parser("report", parents=[opts["checkpoint"], opts["device_cpu"]],
                         help="one self-contained HTML page comparing runs",
                         description="One self-contained HTML page (figures inlined, no external assets) comparing "
                                     "runs: configs, parameter summaries, training curves, BLEU/chrF (from "
                                     "`attnlab evaluate`), BLEU by length, sample translations with heatmaps.")
    rep.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", type=Path, metavar="FILE.html", help="output file (default runs/report.html)")
    rep.add_argument("--split", choices=("train", "dev", "test"), default="test",
                     help="split of the scores table and of the sample sentences (default test)")
    rep.add_argument("--samples", type=_int(0, MAX_SAMPLES), default=4,
                     help="sample sentences from the split (default 4)")
    rep.add_argument("--sentence", action="append", metavar="TEXT",
                     help="translate this sentence instead of split samples (repeatable)")
    rep.add_argument("--beam", type=_int(1, MAX_BEAM), default=None,
                     help="beam size of the samples (default: each run's)")
    rep.set_defaults(func=cmd_report)

    srv = sub.add_parser("serve", parents=[opts["checkpoint"], opts["device_cpu"]],
                         help="web app: translate and explore attention in the browser",
                         description="Serve runs in a local web app (FastAPI + uvicorn): type a sentence, pick "
                                     "models side by side, get the translation and an interactive attention "
                                     "heatmap. JSON API: GET /api/models, POST /api/translate; schema at "
                                     "/openapi.json. Models are named by their run directory's name.")
    srv.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR",
                     help="run directories, or pretrained:NAME (a model that ships with attnlab: attnlab pretrained)")
    srv.add_argument("--pretrained", action="store_true",
                     help="serve every model that ships with attnlab too (no training needed; attnlab pretrained); the "
                          "page opens on the compare view: one sentence through every model side by side")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=_int(0, 65535), default=8000, help="TCP port (default 8000)")
    srv.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="a Host name the server answers besides localhost, 127.0.0.1, ::1 and the --host "
                          "address, e.g. a classroom's DNS name (repeatable; others get 421, which keeps a web page "
                          "that rebinds its name to this machine from reading it)")
    srv.add_argument("--max-chars", type=_int(1, MAX_CHARS), default=1000,
                     help="longest sentence accepted, in characters (default 1000; tokens: the run's "
                          "decode.max_src_tokens)")
    srv.add_argument("--timeout", type=_float(0.001, 86400.0), default=60.0,
                     help="seconds a translation may take, queueing included, before a 503 (default 60)")
    srv.add_argument("--max-connections", type=_int(1, MAX_CONNECTIONS), default=4096,
                     help="open connections at most (default 4096)")
    srv.add_argument("--header-timeout", type=_float(0.001, 3600.0), default=10.0,
                     help="close a connection that has not sent its request head within this many seconds "
                          "(default 10)")
    srv.add_argument("--body-timeout", type=_float(0.001, 3600.0), default=10.0,
                     help="answer 408 and close when a request body has not fully arrived this many seconds after "
                          "its head (default 10)")
    srv.add_argument("--max-connections-per-client", type=_int(1, MAX_CONNECTIONS), default=256,
                     help="open connections per client IP address (default 256; behind a reverse proxy every "
                          "client has the proxy's address: let the proxy limit clients, see docs/deployment.md)")
    srv.add_argument("--explore-memory", type=_int(1, 2**20), default=256, metavar="MIB",
                     help="memory for the explorations the page still fetches weights of, in MiB (default 256); "
                          "the least recently used go first, and their follow-up fetches get 410 (explore again)")
    srv.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch",
                     help="decode Transformer runs with their CTranslate2 export (exported on first use; attention: "
                          "the last layer's, mean of heads)")
    srv.set_defaults(func=cmd_serve)

    ser = sub.add_parser("series", parents=[opts["overrides"]],
                         help="many-to-one RNN regression with vs without the IF3270 attention layer",
                         description="Train SimpleRNN + Dense and SimpleRNN + attention + Dense (the IF3270 "
                                     "seed's models) on a series, over several seeds, with the one trainer, and "
                                     "print the test MSE (mean +/- std) and whether attention lowers it.")
    ser.add_argument("target", metavar="TASK_OR_CONFIG",
                     help="fib (fibonacci: the seed's 1,200 Fibonacci numbers), sine (noisy two-period sine), "
                          "or a series config file such as configs/seed-fib-attention.toml")
    ser.add_argument("--seeds", type=_int(1, MAX_SEEDS), default=5, help="train with seeds 1..N (default 5)")
    ser.add_argument("--only", choices=("both", *SERIES_VARIANTS), default="both",
                     help="which model(s) to train (default both)")
    ser.add_argument("--out", type=Path, help="output directory (default runs/series/<task>)")
    ser.add_argument("--json", action="store_true", help="print all results as JSON")
    ser.set_defaults(func=cmd_series)

    demo = sub.add_parser("demo", parents=[opts["overrides"]],
                          help="the main job on the default data (what `make demo` runs)",
                          description="Build the Bible corpus and print its statistics, train an attention "
                                      "model, show test translations and test BLEU.")
    demo.add_argument("--config", type=Path, default=Path("demo"),
                      help="a config file or a packaged config's name (default: demo, the packaged configs/demo.toml)")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory (replaced; default runs/demo)")
    demo.add_argument("--beam", type=_int(1, MAX_BEAM), default=5, help="beam size for the test BLEU (default 5)")
    demo.add_argument("--procs", type=_int(0, MAX_PROCS), default=0, metavar="N",
                      help="data-parallel training processes, as train --procs (default 0: two 1-thread processes "
                           "on a CPU with 2+ cores, which trained the demo better than one 2-thread process; one "
                           "on a GPU)")
    demo.set_defaults(func=cmd_demo)
    parser.commands = sub.choices  # the subcommand parsers, for `parse_args` below
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parses argv; a command without sub-commands of its own takes its positionals anywhere among its options
    (`attnlab translate RUN_DIR --checkpoint last FILE`), which argparse's plain parse refuses."""
    commands = getattr(parser, "commands", {})
    if argv and argv[0] in commands and argv[0] not in NESTED_COMMANDS:
        return commands[argv[0]].parse_intermixed_args(argv[1:], argparse.Namespace(command=argv[0]))
    return parser.parse_args(argv)


def _crash_file(exc: BaseException, argv: list[str]) -> Path | None:
    """Writes the traceback of an unexpected exception (with the versions and the command line) to a new file
    under the cache folder, or the temporary folder if that is not writable; returns its path (None if neither
    is)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (f"attnlab {__import__('attnlab').__version__}, Python {platform.python_version()}, torch "
            f"{torch.__version__}, {platform.platform()}\ncommand: attnlab {' '.join(argv)}\ntime: {stamp}\n\n"
            + "".join(traceback.format_exception(exc)))
    for folder in (cache_dir() / "crashes", Path(tempfile.gettempdir())):
        path = folder / f"attnlab-crash-{stamp}-{os.getpid()}.txt"
        try:
            make_dirs(folder)
            atomic_write_text(path, text)
            return path
        except (AttnlabError, OSError):
            continue
    return None


def _internal_error(exc: Exception, argv: list[str]) -> int:
    """The last resort for an exception that is not a user mistake: one line naming it and the file that holds
    its traceback, exit code 1. Running out of memory is a user's size choice meeting the machine, not a bug:
    one line, exit code 2."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in message:
        print(f"attnlab: error: out of memory ({type(exc).__name__}: {message[:200]}); choose smaller sizes, "
              "batches or beams", file=sys.stderr)
        return 2
    path = _crash_file(exc, argv)
    where = f"the full traceback is in {path}" if path else "the traceback could not be saved"
    print(f"attnlab: internal error: {type(exc).__name__}: {message[:300]}; {where}; please report it",
          file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns the exit code: 0 done, 2 a user mistake (one line on stderr), 1 an internal error
    (one line naming the file with its traceback; with $ATTNLAB_RAISE_INTERNAL set the exception propagates),
    130 interrupted."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:
        # `kill -USR1 PID`: every thread's Python stack on stderr, and the process goes on (where is a run stuck?)
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        args = parse_args(build_parser(), argv)
        setup_logging()
        args.func(args)
    except AttnlabError as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # SystemExit (argparse, --help) is no Exception and passes through
        if os.environ.get(RAISE_INTERNAL, "") not in ("", "0"):
            raise
        return _internal_error(e, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
