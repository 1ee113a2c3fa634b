"""The grammar of the `attnlab` command line, built per command: one `add_<command>` function each (listed in
`COMMANDS`, the order of `attnlab --help`) on the options several commands share, each declared once
(`attnlab.app.options`). It imports the commands it dispatches to (`attnlab.app.commands`), the API's names and
limits, and `attnlab.core` (import-linter's contract "the command line goes through the API", pyproject.toml). The
entry point and its error handling are `attnlab.app.cli`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.app.api import (ENGLISH_MODULES, MAX_CHARS, MAX_CONNECTIONS, MAX_PROCS, MAX_SEEDS, MAX_SUMMARY_LEN,
                             SERIES_VARIANTS)
from attnlab.app.commands import (cmd_average, cmd_configs, cmd_data, cmd_data_paraphrase, cmd_data_prepare,
                                  cmd_demo, cmd_evaluate, cmd_export, cmd_generate, cmd_import, cmd_paraphrase_plot,
                                  cmd_plot_attention, cmd_plot_explore, cmd_plot_runs, cmd_pretrained, cmd_report,
                                  cmd_series, cmd_serve, cmd_summary, cmd_train, cmd_translate)
from attnlab.app.options import (Options, beam_option, engine_option, float_in, formats_option, held_out_options,
                                 int_in, option_groups, split_option, tokenizer_options)
from attnlab.core.config import MAX_BEAM, MAX_COUNT, MAX_LAYERS, MAX_LEN, MAX_SAMPLES, MAX_SEED, MAX_VOCAB

NESTED_COMMANDS = ("data", "paraphrase", "plot")  # commands with sub-commands of their own


# ---------------------------------------------------------------------------------------------- data
def add_data(sub: argparse._SubParsersAction, opts: Options) -> None:
    data = sub.add_parser("data", help="build or check a parallel corpus and print its statistics",
                          description="Build or check a parallel corpus and print its statistics.")
    dsub = data.add_subparsers(dest="source", metavar="SOURCE", required=True)
    for add in (add_data_bible, add_data_tsv, add_data_files, add_data_paraphrase, add_data_prepare):
        add(dsub, opts)


def add_data_bible(dsub: argparse._SubParsersAction, opts: Options) -> None:
    bible = dsub.add_parser("bible", help="English (KJV) -> Spanish (RV 1909) Bible from Debian's SWORD modules")
    bible.add_argument("--english", choices=ENGLISH_MODULES, default="kjv",
                       help="English source: King James (kjv) or World English Bible (web)")
    bible.add_argument("--refresh", action="store_true", help="rebuild the cached corpus")
    bible.add_argument("--export", type=Path, metavar="DIR", help="write train/dev/test TSV files to DIR")
    tokenizer_options(bible)
    bible.set_defaults(func=cmd_data)


def add_data_tsv(dsub: argparse._SubParsersAction, opts: Options) -> None:
    tsv = dsub.add_parser("tsv", help="a source<TAB>target file")
    tsv.add_argument("file", type=Path)
    tsv.add_argument("--dev", type=Path, help="dev split as TSV (default: held out of FILE)")
    tsv.add_argument("--test", type=Path, help="test split as TSV (default: held out of FILE)")
    held_out_options(tsv)
    tokenizer_options(tsv)
    tsv.set_defaults(func=cmd_data)


def add_data_files(dsub: argparse._SubParsersAction, opts: Options) -> None:
    files = dsub.add_parser("files", help="two line-aligned plain files")
    files.add_argument("src", type=Path)
    files.add_argument("tgt", type=Path)
    held_out_options(files)
    tokenizer_options(files)
    files.set_defaults(func=cmd_data)


def add_data_paraphrase(dsub: argparse._SubParsersAction, opts: Options) -> None:
    para = dsub.add_parser("paraphrase", help="KJV vs WEB verse pairs for paraphrase identification",
                           description="Pairs of English renderings of Bible verses, KJV (a) vs World English "
                                       "Bible (b): label 1 = same verse, 0 = another verse of the same chapter "
                                       "(hard) or of another chapter (easy); balanced, split by book.")
    para.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="seed of the negative pairs (default 0)")
    para.add_argument("--refresh", action="store_true", help="re-read the SWORD modules (rebuild the cache)")
    para.add_argument("--hard-negatives", choices=("random", "overlap"), default="random",
                      help="hard negatives: a random verse of the chapter (default), or the one sharing the most "
                           "words with a")
    para.add_argument("--export", type=Path, metavar="DIR", help="write train/dev/test TSV files to DIR")
    para.add_argument("--json", action="store_true", help="print the statistics as JSON")
    para.set_defaults(func=cmd_data_paraphrase)


def add_data_prepare(dsub: argparse._SubParsersAction, opts: Options) -> None:
    prep = dsub.add_parser(
        "prepare", parents=[opts["overrides"]], help="prepare a translation or LM config's corpus once: filtered, "
        "tokenized and written to a token-id store (what `attnlab train` does on first use)",
        description="Prepare the corpus of a translation or language-model config once: read it as a stream (TSV, "
                    "JSON lines or two aligned files, plain or .gz/.xz/.bz2; an LM's text: one sentence a line), "
                    "hold out dev/test, apply the training filters "
                    "(data.max_words, data.max_ratio, data.dedup, data.max_train_pairs), train the tokenizer on a "
                    "bounded sample (tokenizer.sample_sentences), encode on every core and write the token ids to a "
                    "store on disk (.bin + .idx) keyed by the inputs. Training, resuming and other configs with the "
                    "same data reuse it; a changed input file or setting builds a new one.")
    prep.add_argument("config", type=Path, help="a translation or language-model config (.toml/.yaml/.json)")
    prep.add_argument("--out", type=Path, metavar="DIR", help="the store's folder (default: the cache, "
                      "$ATTNLAB_CACHE/stores/NAME-KEY); train from it with --set data.store=DIR")
    prep.add_argument("--force", action="store_true", help="build it again even if it is there (a damaged store)")
    prep.add_argument("--json", action="store_true", help="print the statistics as JSON")
    prep.set_defaults(func=cmd_data_prepare)


# ---------------------------------------------------------------------------------------------- configs and models
def add_configs(sub: argparse._SubParsersAction, opts: Options) -> None:
    cfgs = sub.add_parser("configs", help="list the packaged configs, print one, or copy one out to edit",
                          description="The configs that ship with attnlab (the recipes of the README and docs). "
                                      "Any command that takes a config takes one of these names too: attnlab "
                                      "train demo, attnlab train bible-transformer-small.")
    cfgs.add_argument("name", nargs="?", metavar="NAME", help="a packaged config (default: list them all)")
    cfgs.add_argument("--copy", nargs="?", const=".", metavar="DEST",
                      help="copy the config to DEST (a file, or a folder; default: the current folder)")
    cfgs.set_defaults(func=cmd_configs)


def add_pretrained(sub: argparse._SubParsersAction, opts: Options) -> None:
    pre = sub.add_parser("pretrained", help="list the trained models that ship with attnlab, with their test BLEU",
                         description="The trained models that ship with attnlab (no training needed). Use one as "
                                     "pretrained:NAME wherever a run directory goes: attnlab translate "
                                     "pretrained:bahdanau, attnlab serve --pretrained, attnlab.load("
                                     "'pretrained:transformer'). Each has a model card: attnlab pretrained NAME.")
    pre.add_argument("name", nargs="?", metavar="NAME", help="print this model's card")
    pre.add_argument("--json", action="store_true", help="print the list as JSON")
    pre.set_defaults(func=cmd_pretrained)


# ---------------------------------------------------------------------------------------------- training
def add_train(sub: argparse._SubParsersAction, opts: Options) -> None:
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


def add_paraphrase(sub: argparse._SubParsersAction, opts: Options) -> None:
    para = sub.add_parser("paraphrase", help="Bible verse paraphrase identification: train, evaluate, plot",
                          description="Sentence-pair classifiers on KJV-vs-WEB verse pairs (see `attnlab data "
                                      "paraphrase`): decomposable attention (Parikh et al. 2016) or the fine-tuned "
                                      "all-MiniLM-L6-v2 encoder, chosen by the config's model.family. train and "
                                      "evaluate are `attnlab train` / `attnlab evaluate` for these runs.")
    psub = para.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in (add_paraphrase_train, add_paraphrase_evaluate, add_paraphrase_plot):
        add(psub, opts)


def add_paraphrase_train(psub: argparse._SubParsersAction, opts: Options) -> None:
    ptrain = psub.add_parser("train", parents=[opts["train"]],
                             help="the same as `attnlab train`, for a pair config (configs/paraphrase-*.toml)",
                             description="The same as `attnlab train` (the one trainer; model selection on dev "
                                         "accuracy), refusing a config that is not a sentence-pair one.")
    ptrain.set_defaults(func=cmd_train, require_ability="classify")


def add_paraphrase_evaluate(psub: argparse._SubParsersAction, opts: Options) -> None:
    peval = psub.add_parser("evaluate", parents=[opts["evaluate"]],
                            help="accuracy on a split, overall and by kind of negative",
                            description="The same as `attnlab evaluate`, for a pair run: accuracy on a split, "
                                        "overall, on the positives, the hard (same chapter) and the easy (other "
                                        "chapter) negatives; writes RUN_DIR/eval/paraphrase_<split>.json and "
                                        "the misclassified pairs.")
    peval.add_argument("--hard-negatives", choices=("random", "overlap"),
                       help="evaluate on these hard negatives instead of the run's: random (a random verse of the "
                            "chapter) or overlap (the verse of the chapter sharing the most words with a)")
    peval.set_defaults(func=cmd_evaluate)


def add_paraphrase_plot(psub: argparse._SubParsersAction, opts: Options) -> None:
    pplot = psub.add_parser("plot", parents=[opts["run_cpu"]],
                            help="heatmaps of the soft alignment of one pair (decomposable)",
                            description="The soft alignment matrix of a pair: rows = tokens of a, columns = "
                                        "tokens of b; OUT.png (each row a softmax over b) and OUT_b.png (each "
                                        "column a softmax over a).")
    pplot.add_argument("--a", required=True, help="sentence a (e.g. a KJV verse)")
    pplot.add_argument("--b", required=True, help="sentence b (e.g. a WEB verse)")
    pplot.add_argument("--out", type=Path, help="output path without suffix (default RUN_DIR/plots/alignment)")
    formats_option(pplot, "png,svg")
    pplot.set_defaults(func=cmd_paraphrase_plot)


# ---------------------------------------------------------------------------------------------- decoding and runs
def add_translate(sub: argparse._SubParsersAction, opts: Options) -> None:
    tr = sub.add_parser("translate", parents=[opts["run"], opts["amp"]],
                        help="translate text with a trained run (stdin to stdout, or files)",
                        description="Translate text with a trained run, one sentence a line. The input FILE may "
                                    "stand before or after the options.")
    tr.add_argument("input", nargs="?", type=Path, metavar="FILE",
                    help="input file, one sentence a line (default or -: stdin; typed at a terminal, each "
                         "line is answered when entered)")
    beam_option(tr, "beam size; 1 = greedy (default: the run's config)")
    tr.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    tr.add_argument("--n-best", type=int_in(1, MAX_BEAM), default=1, help="print the N best (line, score, text)")
    engine_option(tr, "decode with attnlab's PyTorch search (default) or a CTranslate2 export of the run")
    tr.add_argument("--ct2-model", type=Path, metavar="DIR",
                    help="the CTranslate2 model to use (default: RUN_DIR/ctranslate2-<checkpoint>-float32, exported "
                         "on first use)")
    tr.set_defaults(func=cmd_translate)


def add_export(sub: argparse._SubParsersAction, opts: Options) -> None:
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


def add_average(sub: argparse._SubParsersAction, opts: Options) -> None:
    avg = sub.add_parser("average", help="average the weights of a run's last N checkpoints (Vaswani et al. 2017)",
                         description="Write a compact float32 run whose weights are the element-wise mean of the "
                                     "run's N newest checkpoints, as Vaswani et al. (2017) averaged their last 5; "
                                     "every command loads it like the run. The run keeps train.keep_last "
                                     "checkpoints (default 2): train with --set train.keep_last=N to average N.")
    avg.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    avg.add_argument("--last", type=int_in(1, 1000), default=5, metavar="N",
                     help="how many of the newest checkpoints (default 5)")
    avg.add_argument("--out", type=Path, metavar="DIR", help="default: RUN_DIR-avgN beside the run")
    avg.set_defaults(func=cmd_average)


def add_import(sub: argparse._SubParsersAction, opts: Options) -> None:
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


def add_evaluate(sub: argparse._SubParsersAction, opts: Options) -> None:
    ev = sub.add_parser("evaluate", parents=[opts["evaluate"], opts["amp"]],
                        help="evaluate a trained run of any family on a split",
                        description="Evaluate a trained run on a split, as its family measures it: translation "
                                    "BLEU/chrF and BLEU by sentence length; language model perplexity; pair "
                                    "classifier accuracy; series MSE. Writes RUN_DIR/eval/.")
    beam_option(ev, "translation: beam size; 1 = greedy (default: the run's)")
    ev.add_argument("--max-sentences", type=int_in(0, MAX_COUNT), default=0,
                    help="translation: only the first N sentences (0: all)")
    ev.add_argument("--source", choices=ENGLISH_MODULES, default=None,
                    help="Bible translation: translate the split from this English rendering (kjv: King James, "
                         "web: World English Bible), whether the run was trained on it or not; writes "
                         "eval/SPLIT.SOURCE.json unless it is the run's first data.english (default: each rendering "
                         "the run was trained on; --json then prints a list when there are several)")
    ev.set_defaults(func=cmd_evaluate)


def add_generate(sub: argparse._SubParsersAction, opts: Options) -> None:
    gen = sub.add_parser("generate", parents=[opts["run"]],
                         help="sample text from a trained language model (decoder-only Transformer)",
                         description="Sample text from a trained language-model run (configs/*-lm.toml): "
                                     "temperature, top-k and top-p (nucleus) sampling with a key/value cache. "
                                     "Defaults come from the run's [generate] section.")
    gen.add_argument("--prompt", action="append", metavar="TEXT",
                     help="text to continue (repeatable; default: sample from the start of a sentence)")
    gen.add_argument("-n", "--num", type=int_in(1, MAX_SAMPLES), default=3, help="samples per prompt (default 3)")
    gen.add_argument("--control", action="store_true",
                     help="let the model generate the tokenizer's control pieces (newlines, tabs; e.g. GPT-2's Ċ), "
                          "which are never generated by default so that each sample is one line; the samples are "
                          "then printed as generated, a blank line after each")
    gen.add_argument("--max-len", type=int_in(1, MAX_LEN), default=None, help="new tokens at most per sample")
    gen.add_argument("--temperature", type=float_in(0.0, 100.0), default=None, help="softmax temperature; 0 = greedy")
    gen.add_argument("--top-k", type=int_in(0, MAX_VOCAB), default=None,
                     help="sample among the k most likely tokens (0: all)")
    gen.add_argument("--top-p", type=float_in(0.0, 1.0), default=None,
                     help="nucleus sampling: smallest set with probability p")
    gen.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="random seed (default 0)")
    gen.add_argument("--scores", action="store_true", help="print each sample's log-probability before it")
    gen.set_defaults(func=cmd_generate)


# ---------------------------------------------------------------------------------------------- plots
def add_plot(sub: argparse._SubParsersAction, opts: Options) -> None:
    plot = sub.add_parser("plot", help="plots: attention heatmaps, training curves, BLEU by sentence length",
                          description="Plots of trained models (PNG/SVG via matplotlib).")
    psub = plot.add_subparsers(dest="what", metavar="WHAT", required=True)
    for add in (add_plot_attention, add_plot_explore, add_plot_curves, add_plot_bleu_by_length):
        add(psub, opts)


def add_plot_attention(psub: argparse._SubParsersAction, opts: Options) -> None:
    patt = psub.add_parser("attention", parents=[opts["run"]],
                           help="cross-attention heatmap (source x output tokens) of one sentence")
    patt.add_argument("--sentence", required=True, help="the source sentence to translate and plot")
    beam_option(patt, "beam size for the translation (default 1)", default=1)
    patt.add_argument("--out", type=Path, help="output path without suffix (default RUN_DIR/plots/attention)")
    formats_option(patt, "png,svg")
    patt.add_argument("--layer", default="-1", help="Transformer: decoder layer 1..N, -1 = last (default), or all")
    patt.add_argument("--head", default="all", help="Transformer: head 1..H, or all (default: a grid of heads)")
    patt.set_defaults(func=cmd_plot_attention)


def add_plot_explore(psub: argparse._SubParsersAction, opts: Options) -> None:
    pexp = psub.add_parser("explore", parents=[opts["run"]],
                           help="every attention of one input, as the explorer's views (heatmap, model, head, "
                                "neuron view) in files",
                           description="The views of `attnlab serve`'s explorer for one input, as PNG/SVG files "
                                       "OUT/<map>_<view>[_layerL][_headH|_mean].<format> (the rollout has no "
                                       "neuron view): translation runs (maps cross, enc_self, "
                                       "enc_self_rollout, dec_self; RNN: align), language models (lm_self, "
                                       "lm_self_rollout: --sentence is the prompt), sentence pairs (a_to_b, "
                                       "b_to_a, ...; MiniLM: a_self, b_self). Prints the paths; the n-best list "
                                       "and each token's probability with its top 5 go to stderr.")
    pexp.add_argument("--sentence", required=True, help="the source sentence, the prompt, or sentence a of a pair")
    pexp.add_argument("--sentence-b", help="sentence b (sentence-pair runs)")
    beam_option(pexp, "translation: beam size (default: the run's)")
    pexp.add_argument("--max-new", type=int_in(1, MAX_LEN), default=40,
                      help="language model: new tokens at most (default 40)")
    pexp.add_argument("--map", help="comma-separated maps (default: all of the run)")
    pexp.add_argument("--view", default="heatmap,model,head,neuron",
                      help="comma-separated views: heatmap, model, head, neuron (default: all)")
    pexp.add_argument("--layer", type=int_in(-MAX_LAYERS, MAX_LAYERS), default=-1,
                      help="layer of the heatmap, head and neuron views (1..N, -1 = last, default)")
    pexp.add_argument("--head", default="mean", help="head number from 1, or mean (default; the neuron view: 1)")
    pexp.add_argument("--query", type=int_in(1, MAX_LEN), default=None,
                      help="neuron view: the query token, from 1 (default: the last of a causal map such as "
                           "decoder self-attention, whose first sees one key, else 1)")
    pexp.add_argument("--words", action="store_true", help="merge subword pieces into words")
    pexp.add_argument("--out", type=Path, help="output directory (default RUN_DIR/plots/explore)")
    formats_option(pexp, "png")
    pexp.set_defaults(func=cmd_plot_explore)


def _add_runs_figure(p: argparse.ArgumentParser) -> None:
    """The runs and output file of a figure that compares runs (plot curves, bleu-by-length)."""
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", type=Path, help="output file (.png/.svg/.pdf; default under runs/plots/)")
    p.set_defaults(func=cmd_plot_runs)


def add_plot_curves(psub: argparse._SubParsersAction, opts: Options) -> None:
    pcur = psub.add_parser("curves", help="training curves (train loss, dev loss, dev BLEU) of runs on one figure")
    _add_runs_figure(pcur)


def add_plot_bleu_by_length(psub: argparse._SubParsersAction, opts: Options) -> None:
    pbl = psub.add_parser("bleu-by-length", help="BLEU by source length of evaluated runs on one figure "
                                                  "(run `attnlab evaluate` first)")
    split_option(pbl)
    _add_runs_figure(pbl)


# ---------------------------------------------------------------------------------------------- inspecting and serving
def add_summary(sub: argparse._SubParsersAction, opts: Options) -> None:
    summ = sub.add_parser("summary", parents=[opts["overrides"]],
                          help="per-layer output shapes and parameter counts of a config or run (any family)",
                          description="Per-layer output shapes and parameter counts (like Keras' model.summary()), "
                                      "from one forward pass on a dummy batch.")
    summ.add_argument("target", type=Path, metavar="CONFIG_OR_RUN")
    summ.add_argument("--src-len", type=int_in(1, MAX_SUMMARY_LEN), default=7, help="dummy source length (default 7)")
    summ.add_argument("--tgt-len", type=int_in(1, MAX_SUMMARY_LEN), default=6, help="dummy target length (default 6)")
    summ.set_defaults(func=cmd_summary)


def add_report(sub: argparse._SubParsersAction, opts: Options) -> None:
    rep = sub.add_parser("report", parents=[opts["checkpoint"], opts["device_cpu"]],
                         help="one self-contained HTML page comparing runs",
                         description="One self-contained HTML page (figures inlined, no external assets) comparing "
                                     "runs: configs, parameter summaries, training curves, BLEU/chrF (from "
                                     "`attnlab evaluate`), BLEU by length, sample translations with heatmaps.")
    rep.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", type=Path, metavar="FILE.html", help="output file (default runs/report.html)")
    split_option(rep, "split of the scores table and of the sample sentences (default test)")
    rep.add_argument("--samples", type=int_in(0, MAX_SAMPLES), default=4,
                     help="sample sentences from the split (default 4)")
    rep.add_argument("--sentence", action="append", metavar="TEXT",
                     help="translate this sentence instead of split samples (repeatable)")
    beam_option(rep, "beam size of the samples (default: each run's)")
    rep.set_defaults(func=cmd_report)


def add_serve(sub: argparse._SubParsersAction, opts: Options) -> None:
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
    srv.add_argument("--port", type=int_in(0, 65535), default=8000, help="TCP port (default 8000)")
    srv.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="a Host name the server answers besides localhost, 127.0.0.1, ::1 and the --host "
                          "address (with --host 0.0.0.0 or ::, this machine's name and addresses, which it prints), "
                          "e.g. a classroom's DNS name (repeatable; others get 421, which keeps a web page that "
                          "rebinds its name to this machine from reading it)")
    srv.add_argument("--max-chars", type=int_in(1, MAX_CHARS), default=1000,
                     help="longest sentence accepted, in characters (default 1000; tokens: the run's "
                          "decode.max_src_tokens)")
    srv.add_argument("--timeout", type=float_in(0.001, 86400.0), default=60.0,
                     help="seconds a translation may take, queueing included, before a 503 (default 60)")
    srv.add_argument("--max-connections", type=int_in(1, MAX_CONNECTIONS), default=4096,
                     help="open connections at most (default 4096)")
    srv.add_argument("--header-timeout", type=float_in(0.001, 3600.0), default=10.0,
                     help="close a connection that has not sent its request head within this many seconds "
                          "(default 10)")
    srv.add_argument("--body-timeout", type=float_in(0.001, 3600.0), default=10.0,
                     help="answer 408 and close when a request body has not fully arrived this many seconds after "
                          "its head (default 10)")
    srv.add_argument("--max-connections-per-client", type=int_in(1, MAX_CONNECTIONS), default=256,
                     help="open connections per client IP address (default 256; behind a reverse proxy every "
                          "client has the proxy's address: let the proxy limit clients, see docs/deployment.md)")
    srv.add_argument("--explore-memory", type=int_in(1, 2**20), default=256, metavar="MIB",
                     help="memory for the explorations the page still fetches weights of, in MiB (default 256); "
                          "the least recently used go first, and their follow-up fetches get 410 (explore again)")
    engine_option(srv, "decode Transformer runs with their CTranslate2 export (exported on first use; attention: "
                     "the last layer's, mean of heads)")
    srv.set_defaults(func=cmd_serve)


# ---------------------------------------------------------------------------------------------- studies
def add_series(sub: argparse._SubParsersAction, opts: Options) -> None:
    ser = sub.add_parser("series", parents=[opts["overrides"]],
                         help="many-to-one RNN regression with vs without the IF3270 attention layer",
                         description="Train SimpleRNN + Dense and SimpleRNN + attention + Dense (the IF3270 "
                                     "seed's models) on a series, over several seeds, with the one trainer, and "
                                     "print the test MSE (mean +/- std) and whether attention lowers it.")
    ser.add_argument("target", metavar="TASK_OR_CONFIG",
                     help="fib (fibonacci: the seed's 1,200 Fibonacci numbers), sine (noisy two-period sine), "
                          "or a series config file such as configs/seed-fib-attention.toml")
    ser.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=5, help="train with seeds 1..N (default 5)")
    ser.add_argument("--only", choices=("both", *SERIES_VARIANTS), default="both",
                     help="which model(s) to train (default both)")
    ser.add_argument("--out", type=Path, help="output directory (default runs/series/<task>); the runs an earlier "
                     "study left there for the same models and seeds are replaced, and results.json holds this "
                     "study's models only")
    ser.add_argument("--json", action="store_true", help="print all results as JSON")
    ser.set_defaults(func=cmd_series)


def add_demo(sub: argparse._SubParsersAction, opts: Options) -> None:
    demo = sub.add_parser("demo", parents=[opts["overrides"]],
                          help="the main job on the default data (what `make demo` runs)",
                          description="Build the Bible corpus and print its statistics, train an attention "
                                      "model, show test translations and test BLEU.")
    demo.add_argument("--config", type=Path, default=Path("demo"),
                      help="a config file or a packaged config's name (default: demo, the packaged configs/demo.toml)")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory (replaced; default runs/demo)")
    beam_option(demo, "beam size for the test BLEU (default 5)", default=5)
    demo.add_argument("--procs", type=int_in(0, MAX_PROCS), default=0, metavar="N",
                      help="data-parallel training processes, as train --procs (default 0: two 1-thread processes "
                           "on a CPU with 2+ cores, which trained the demo better than one 2-thread process; one "
                           "on a GPU)")
    demo.set_defaults(func=cmd_demo)


# ---------------------------------------------------------------------------------------------- the command line
COMMANDS = (add_data, add_configs, add_pretrained, add_train, add_paraphrase, add_translate, add_export, add_average,
            add_import, add_evaluate, add_generate, add_plot, add_summary, add_report, add_serve, add_series, add_demo)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as every other user mistake ("attnlab translate: error:
    argument --beam: 1000000000 exceeds the limit 256 (attnlab translate --help)"), exit code 2; its
    sub-parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top parser and one sub-parser per command, each declared by its `add_<command>(subparsers, opts)` in
    COMMANDS, whose order is the order of `attnlab --help`."""
    parser = OneLineParser(
        prog="attnlab", description="Attention-based sequence models: build corpora, train, decode, look inside.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__import__('attnlab').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    opts = option_groups()
    for add in COMMANDS:
        add(sub, opts)
    parser.commands = sub.choices  # the subcommand parsers, for `parse_args` below
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parses argv; a command without sub-commands of its own takes its positionals anywhere among its options
    (`attnlab translate RUN_DIR --checkpoint last FILE`), which argparse's plain parse refuses."""
    commands = getattr(parser, "commands", {})
    if argv and argv[0] in commands and argv[0] not in NESTED_COMMANDS:
        return commands[argv[0]].parse_intermixed_args(argv[1:], argparse.Namespace(command=argv[0]))
    return parser.parse_args(argv)
