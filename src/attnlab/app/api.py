"""The Python API: what a script or a notebook uses, and what the command line calls (`attnlab.app.commands`
imports nothing else of attnlab but the errors and limits of `attnlab.core`).

    import attnlab
    run = attnlab.load("runs/demo")                     # the run `make demo` trains
    run.translate("In the beginning God created the heaven and the earth.")
    run.explore("And God said, Let there be light")     # in a notebook: the attention explorer, inline
    run.evaluate("test")                                # BLEU, chrF, BLEU by source length

    run = attnlab.train("demo", out="runs/mine", train__max_minutes=2)   # a packaged config, or a file
    attnlab.show(weights, src_tokens, tgt_tokens)      # any attention a model of yours computed

`load`, `Run`, `train`, `corpus`, `show` and the configs are defined in `attnlab.runs.run` and re-exported here;
this module adds what each command does beyond them: corpora and their statistics, preparing a store, training
with several processes, the plots, the report, the server, the series study, export and import, the demo.

Every call takes the same path as the command line (`attnlab.runs.workflow`), so a run trained here is a run directory
like any other, and a user's mistake is the same one-line `attnlab.AttnlabError`: each public function checks its
arguments' types and ranges where it is entered, with the command line's limits (`attnlab.core.config.MAX_BEAM`, ...).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from attnlab.app import study
from attnlab.app.report import build_report
from attnlab.app.server import EXPLORE_MEMORY, START_VIEWS
from attnlab.app.server import serve as serve_runs
from attnlab.core.config import (MAX_BEAM, MAX_COUNT, MAX_SAMPLES, MAX_SEED, MAX_VOCAB, PACKAGED_CONFIGS,
                                 resolve_config)
from attnlab.core.devices import resolve_device
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, cache_dir, read_json
from attnlab.core.logs import read_metrics
from attnlab.core.metrics import is_length_rows
from attnlab.core.plotting import plot_attention as plot_heatmap
from attnlab.core.plotting import plot_attention_grid, plot_bleu_by_length, plot_curves
from attnlab.data import bible, paraphrase
from attnlab.data.corpus import Corpus, corpus_stats, format_stats, normalize
from attnlab.data.corpus import file_corpus as read_file_corpus
from attnlab.data.paraphrase import ParaphraseCorpus, format_paraphrase_stats, paraphrase_stats
from attnlab.data.store import Store, format_store_stats
from attnlab.data.tokenizers import cached_tokenizers, one_line, save_tokenizers
from attnlab.decode.translate import DecodeConfig
from attnlab.families.pairs import plot_alignment as plot_pair_alignment
from attnlab.families.series import TASKS as SERIES_TASKS
from attnlab.families.series import VARIANTS as SERIES_VARIANTS
from attnlab.families.series import load_series_config
from attnlab.families.table import FAMILIES, load_family_config
from attnlab.families.translation import format_seq2seq_eval, prepare_corpus
from attnlab.runs import workflow
from attnlab.runs.checks import as_bool, as_int, as_optional_int, as_optional_path, as_path, as_text, as_texts
from attnlab.runs.run import (CHECKPOINTS, SPLITS, ConfigInfo, Run, config_path, configs, corpus, load, override_list,
                              show, train, typed_config)
from attnlab.runs.shipped import Shipped, shipped_models, shipped_names, shipped_run
from attnlab.runs.shipped import run_path as shipped_run_path
from attnlab.runs.views import VIEWS, Exploration, format_decoding, write_views

__all__ = [
    # runs (attnlab.runs.run)
    "ConfigInfo", "Run", "config_path", "configs", "corpus", "load", "override_list", "show", "train",
    "typed_config",
    # corpora
    "bible_corpus", "file_corpus", "paraphrase_corpus", "corpus_statistics", "export_tsv", "prepare",
    "format_corpus_stats", "format_paraphrase_stats", "format_store_stats", "paraphrase_stats",
    # runs, plots, apps
    "train_processes", "summary", "copy_config", "export_run", "import_run", "plot_alignment", "plot_attention",
    "write_views", "format_decoding", "plot_curves_of", "plot_bleu_by_length_of", "report", "serve",
    "series_study", "format_series_study", "demo", "pretrained_models", "pretrained_names", "pretrained_card",
    "run_path",
    # what the command line shares with the library: names, limits, text
    "AttnlabError", "CHECKPOINTS", "DecodeConfig", "ENGLISH_MODULES", "Exploration", "PACKAGED_CONFIGS",
    "SERIES_VARIANTS", "SPLITS", "TOKENIZERS", "VIEWS", "cache_dir", "normalize", "one_line",
    "MAX_SUMMARY_LEN", "MAX_CHARS", "MAX_CONNECTIONS", "MAX_SEEDS", "MAX_PROCS",
]

log = logging.getLogger("attnlab")

ENGLISH_MODULES = tuple(bible.ENGLISH_MODULES)  # the Bible's English renderings: kjv, web
TOKENIZERS = ("unigram", "bpe", "char", "none")
# Limits of the arguments without a config key of their own (the others share config.py's): each far beyond a
# useful value and small enough that nothing they size (a batch of samples, a list of seeds) exhausts memory.
MAX_SUMMARY_LEN = 4096  # summary's src_len/tgt_len: a dummy batch
MAX_CHARS = 10**6  # serve's max_chars
MAX_CONNECTIONS = 10**6  # serve's max_connections
MAX_SEEDS = 1000  # series_study's seeds
MAX_PROCS = 1024  # train_processes' procs
DEMO_SAMPLES = 6  # test verses the demo translates


def _choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise AttnlabError(f"{name} {value!r:.40} is not one of {', '.join(choices)}")
    return value


def _run(value: Any) -> Run:
    if not isinstance(value, Run):
        raise AttnlabError(f"run must be an attnlab.Run (attnlab.load(RUN_DIR)), not {type(value).__name__}")
    return value


def _output_stem(path: Path) -> Path:
    """An output path the formats' suffixes are put on; it must name a file, not end in a folder's name."""
    if path.name in ("", ".", ".."):
        raise AttnlabError(f"--out {str(path)!r}: give a file path (the format's suffix is added to it)")
    return path


# ---------------------------------------------------------------------------------------------- corpora
def bible_corpus(english: str = "kjv", refresh: bool = False) -> Corpus:
    """The English (`english`: kjv or web) -> Spanish (Reina-Valera 1909) Bible, verse-aligned and split by book
    (`attnlab.data.bible`), cached; refresh=True reads the SWORD modules again."""
    return bible.bible_corpus(_choice("english", english, ENGLISH_MODULES), refresh=as_bool("refresh", refresh))


def file_corpus(train: str | Path | Sequence[str | Path], dev: str | Path | None = None,
                test: str | Path | None = None, *, dev_size: int = 500, test_size: int = 500) -> Corpus:
    """A user's parallel corpus: `train` a TSV file (source, target) or a pair (source file, target file) of
    line-aligned plain files; dev and test given as TSV files, or held out of train (dev_size, test_size pairs)."""
    if isinstance(train, (str, os.PathLike)):
        train = as_path("train", train)
    elif isinstance(train, (list, tuple)) and len(train) == 2:
        train = (as_path("train[0]", train[0]), as_path("train[1]", train[1]))
    else:
        raise AttnlabError(f"train must be a TSV file or a (source, target) pair of files, not {type(train).__name__}")
    return read_file_corpus(train, as_optional_path("dev", dev), as_optional_path("test", test),
                            dev_size=as_int("dev_size", dev_size, 0, MAX_COUNT),
                            test_size=as_int("test_size", test_size, 0, MAX_COUNT))


def paraphrase_corpus(seed: int = 0, refresh: bool = False, hard_negatives: str = "random") -> ParaphraseCorpus:
    """The KJV-vs-WEB verse pairs for paraphrase identification (`attnlab.data.paraphrase`): label 1 the same
    verse, 0 another verse of the same chapter (hard: a random one, or the one sharing the most words with a) or of
    another chapter (easy); balanced, split by book."""
    return paraphrase.paraphrase_corpus(as_int("seed", seed, 0, MAX_SEED), refresh=as_bool("refresh", refresh),
                                        hard_negatives=_choice("hard_negatives", hard_negatives, ("random", "overlap")))


def corpus_statistics(corpus: Corpus, tokenizer: str = "unigram", vocab_size: int = 8000, joint: bool = True,
                      save_tokenizer: str | Path | None = None) -> dict:
    """Pairs per split and lengths per side in words and, with a tokenizer ("unigram", "bpe", "char"; "none":
    words only) trained on the train split, in tokens; save_tokenizer: a folder to save that tokenizer to."""
    if not isinstance(corpus, Corpus):
        raise AttnlabError(f"corpus must be a parallel corpus (bible_corpus, file_corpus), not {type(corpus).__name__}")
    tokenizer, vocab_size = _choice("tokenizer", tokenizer, TOKENIZERS), as_int("vocab_size", vocab_size, 1, MAX_VOCAB)
    joint, save_tokenizer = as_bool("joint", joint), as_optional_path("save_tokenizer", save_tokenizer)
    toks = None
    if tokenizer != "none":
        toks = cached_tokenizers(corpus, tokenizer, vocab_size, joint)
        if save_tokenizer:
            save_tokenizers(toks, save_tokenizer)
    return corpus_stats(corpus, toks)


format_corpus_stats = format_stats


def export_tsv(corpus: Corpus | ParaphraseCorpus, directory: str | Path) -> str:
    """Writes DIRECTORY/{train,dev,test}.tsv, one pair a line, and returns the columns written: a parallel corpus's
    source, target, reference, or a paraphrase corpus's a, b, label, kind, ref_a, ref_b."""
    directory = as_path("directory", directory)
    if isinstance(corpus, ParaphraseCorpus):
        columns = "a, b, label, kind, ref_a, ref_b"
        row = lambda p: f"{p.a}\t{p.b}\t{p.label}\t{p.kind}\t{p.ref_a}\t{p.ref_b}"  # noqa: E731
    elif isinstance(corpus, Corpus):
        columns, row = "source, target, reference", lambda p: f"{p.src}\t{p.tgt}\t{p.ref}"  # noqa: E731
    else:
        raise AttnlabError(f"corpus must be a corpus (bible_corpus, file_corpus, paraphrase_corpus), not "
                           f"{type(corpus).__name__}")
    for split in SPLITS:
        atomic_write_text(directory / f"{split}.tsv", "".join(row(p) + "\n" for p in corpus.split(split)))
    return columns


def prepare(config: str | Path, overrides: Mapping[str, Any] | Sequence[str] | None = None,
            out: str | Path | None = None, force: bool = False) -> Store:
    """Prepares a translation or language-model config's corpus once (`attnlab.data.prepare`; an LM's is a
    monolingual store), what `train` otherwise does on first use: into `out` (default: the cache, keyed by the
    inputs), again if force=True (a damaged store)."""
    sets, config = override_list(overrides), as_path("config", config)
    out, force = as_optional_path("out", out), as_bool("force", force)
    family, cfg = load_family_config(config, sets)
    if family.prepare is None:
        names = " or ".join(sorted(f.name for f in FAMILIES if f.prepare is not None))
        raise AttnlabError(f"{config} is a {family.title} config; `attnlab data prepare` prepares the corpus of "
                           f"a translation or language-model config (model.family {names})")
    return family.prepare(cfg, out, force)


# ---------------------------------------------------------------------------------------------- runs
def train_processes(procs: int, config: str | Path | None, out: str | Path, *, resume: bool = False,
                    overrides: Mapping[str, Any] | Sequence[str] | None = None) -> None:
    """`train` with `procs` data-parallel processes on this machine, under torchrun (gloo on the CPU, one GPU
    each with CUDA; the same update as one process with all their batches), each given cores / procs torch
    threads unless the config sets train.num_threads. resume=True continues the run in `out` (config None)."""
    procs, out, sets = as_int("procs", procs, 1, MAX_PROCS), as_path("out", out), override_list(overrides)
    if as_bool("resume", resume):
        threads = workflow.run_config(out)[1].get("train", {}).get("num_threads", 0)
        train_args = ["--resume", str(out)]
    else:
        config = as_path("config", config)
        threads = typed_config(config, sets)[1].train.num_threads
        train_args = [str(config), "--out", str(out)]
    if os.environ.get("LOCAL_RANK") is not None:
        raise AttnlabError("--procs starts its own processes; under torchrun leave it out")
    if not threads and not any(s.split("=", 1)[0].strip() == "train.num_threads" for s in sets):
        sets = [*sets, f"train.num_threads={max(1, (os.cpu_count() or 1) // procs)}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
           "-m", "attnlab.app.cli", "train", *train_args, *(x for s in sets for x in ("--set", s))]
    log.info("starting %d training processes: %s", procs, " ".join(cmd[1:]))
    rc = subprocess.call(cmd)
    if rc != 0:
        raise AttnlabError(f"the {procs} training processes exited with status {rc} (their messages are above)")


def summary(target: str | Path, overrides: Mapping[str, Any] | Sequence[str] | None = None, src_len: int = 7,
            tgt_len: int = 6) -> str:
    """Per-layer output shapes and parameter counts of a config file or a run directory's model, from one forward
    pass on a dummy batch of src_len source and tgt_len target tokens (`Run.summary` for a loaded run)."""
    sets, target = override_list(overrides), as_path("target", target)
    return workflow.summary(target, sets, as_int("src_len", src_len, 1, MAX_SUMMARY_LEN),
                            as_int("tgt_len", tgt_len, 1, MAX_SUMMARY_LEN))


def copy_config(name: str | Path, dest: str | Path = ".") -> Path:
    """Copies a config (a packaged config's name, or a file) to `dest`, a file or a folder, to edit; returns the
    new file. An existing file is not replaced."""
    path, dest = config_path(name), as_path("dest", dest)
    if dest.is_dir():
        dest = dest / path.name
    if dest.exists():
        raise AttnlabError(f"{dest} exists; choose another destination or remove it first")
    atomic_write_text(dest, path.read_text(encoding="utf-8"))
    return dest


def export_run(run_dir: str | Path, out: str | Path | None = None, quantization: str = "float32",
               checkpoint: str = "best", to: str = "ctranslate2") -> Path:
    """Exports a run to CTranslate2 (a Transformer translation or language-model run; default
    RUN_DIR/ctranslate2-<checkpoint>-<quantization>) or Hugging Face transformers (to="huggingface"; a Transformer
    translation run; default RUN_DIR/huggingface-<checkpoint>) or a compact attnlab run of any family (to="attnlab";
    quantization float32, bfloat16 or int8; default RUN_DIR-<quantization>); returns the folder."""
    run_dir, out = as_path("run_dir", run_dir), as_optional_path("out", out)
    return workflow.export_run(run_dir, out, as_text("quantization", quantization),
                               _choice("checkpoint", checkpoint, CHECKPOINTS),
                               _choice("to", to, ("ctranslate2", "huggingface", "attnlab")))


def pretrained_models() -> list[Shipped]:
    """The trained models that ship with attnlab (`attnlab.runs.shipped`): name, family, test BLEU by English
    source, size. Load one with `load("pretrained:NAME")`."""
    return shipped_models()


def pretrained_names() -> list[str]:
    return shipped_names()


def run_path(value: str | Path) -> Path:
    """A run directory from what a user typed: `pretrained:NAME` is a shipped model's (copied once into the cache),
    anything else a path."""
    return shipped_run_path(as_path("run_dir", value))


def pretrained_card(name: str) -> str:
    """The model card (README.md) of the shipped model NAME."""
    return (shipped_run(as_text("name", name)) / "README.md").read_text(encoding="utf-8")


def average_run(run_dir: str | Path, last: int = 5, out: str | Path | None = None) -> Path:
    """A compact float32 run whose weights are the mean of the run's `last` newest checkpoints (checkpoint
    averaging, Vaswani et al. 2017; train with train.keep_last >= last); default RUN_DIR-avgN beside the run.
    `load` and every command use it like the run; returns the folder."""
    return workflow.average_run(as_path("run_dir", run_dir), as_int("last", last, 1, MAX_COUNT),
                                as_optional_path("out", out))


def import_run(src: str | Path, out: str | Path) -> Path:
    """A run directory `out` made from a Hugging Face model: MarianMT (a translation run), GPT-2-class (a language
    model) or BERT-class (an encoder to explore); a save_pretrained folder, or a hub name with internet. `load` and
    every command then use it like a trained run."""
    return workflow.import_run(src if isinstance(src, str) else as_path("src", src), as_path("out", out))


# ---------------------------------------------------------------------------------------------- plots
def plot_alignment(run: Run, a: str, b: str, out: str | Path | None = None,
                   formats: Sequence[str] = ("png", "svg")) -> tuple[list[Path], float]:
    """Heatmaps of the soft alignment of one pair of a decomposable-attention run: OUT.<format> (rows a's tokens,
    each a softmax over b) and OUT_b.<format>; returns the paths and P(same verse). Default OUT:
    RUN_DIR/plots/alignment."""
    run = _run(run)
    run.require("classify")
    a, b, formats = as_text("a", a), as_text("b", b), as_texts("formats", formats)
    out = _output_stem(as_optional_path("out", out) or run.path / "plots" / "alignment")
    return plot_pair_alignment(run.loaded, a, b, out, tuple(formats))


def _index(value: str, n: int, flag: str) -> int:
    """A 1-based (or negative, from the end) layer/head number, as a 0-based index."""
    try:
        i = int(value)
    except ValueError:
        raise AttnlabError(f"{flag} {value!r}: give a number (1..{n}, -1 for the last) or 'all'") from None
    if not (1 <= i <= n or -n <= i <= -1):
        raise AttnlabError(f"{flag} {i} is out of range: the model has {n}")
    return i - 1 if i > 0 else n + i


def plot_attention(run: Run, sentence: str, out: str | Path | None = None, beam: int = 1,
                   formats: Sequence[str] = ("png", "svg"), layer: int | str = -1,
                   head: int | str = "all") -> tuple[list[Path], str]:
    """The cross-attention heatmap of one sentence's translation, one file per format (default OUT:
    RUN_DIR/plots/attention); returns the paths and the translation. A Transformer's layer and head are numbered
    from 1 as on the command line (-1: the last) or "all" (a grid); an RNN's one attention map has neither, so a
    layer or head other than these defaults is refused for it."""
    translator = _run(run).translator
    sentence = normalize(as_text("sentence", sentence))
    if not sentence:
        raise AttnlabError("--sentence is empty")
    beam, formats = as_int("beam", beam, 1, MAX_BEAM), as_texts("formats", formats)
    t = translator.translate([sentence], beam_size=beam, need_weights=True)[0][0]
    if t.attention is None:
        raise AttnlabError(f"{run.path}: this model has no attention to plot (attention = 'none')")
    out = _output_stem(as_optional_path("out", out) or run.path / "plots" / "attention.png")
    title = f"{sentence} -> {t.text}"
    att = t.attention.numpy()  # RNN: (T, S); Transformer: (T, layers, heads, S)
    if att.ndim == 2 and (str(layer) != "-1" or str(head) != "all"):
        given = f"--layer {layer}" if str(layer) != "-1" else f"--head {head}"
        raise AttnlabError(f"{given}: {run.path} is an RNN run, whose attention is one map with no layers or heads "
                           "(--layer and --head choose a Transformer's)")
    paths = []
    for suffix in formats:
        path = out.with_suffix("." + suffix)
        if att.ndim == 2:
            plot_heatmap(att, t.src_tokens, t.tgt_tokens, path, title=title)
        else:
            n_layers, n_heads = att.shape[1], att.shape[2]
            layers = range(n_layers) if layer == "all" else [_index(str(layer), n_layers, "--layer")]
            heads = range(n_heads) if head == "all" else [_index(str(head), n_heads, "--head")]
            grid = [att[:, i, h] for i in layers for h in heads]  # each (T, S)
            names = [f"layer {i + 1} head {h + 1}" for i in layers for h in heads]
            if len(grid) == 1:
                plot_heatmap(grid[0], t.src_tokens, t.tgt_tokens, path, title=f"{names[0]}: {title}")
            else:
                plot_attention_grid(grid, t.src_tokens, t.tgt_tokens, path, names, ncols=min(n_heads, 4),
                                    suptitle=f"cross-attention: {title}")
        paths.append(path)
    return paths, t.text


def _run_names(run_dirs: Sequence[str | Path]) -> dict[str, Path]:
    """Each run directory by its name (its full path where two names clash)."""
    names: dict[str, Path] = {}
    for i, given in enumerate(run_dirs):
        given = as_path(f"run_dirs[{i}]", given)
        names[given.name if given.name not in names else str(given)] = shipped_run_path(given)  # pretrained:NAME
    return names


def plot_curves_of(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """The training curves (train loss, dev loss, dev BLEU) of runs on one figure (default
    runs/plots/curves.png)."""
    runs = {}
    for name, run in _run_names(run_dirs).items():
        if not (run / "metrics.jsonl").is_file():
            raise AttnlabError(f"{run}: no metrics.jsonl (not a run directory?)")
        runs[name] = read_metrics(run)
    return plot_curves(runs, as_optional_path("out", out) or Path("runs/plots/curves.png"))


def plot_bleu_by_length_of(run_dirs: Sequence[str | Path], split: str = "test",
                           out: str | Path | None = None) -> Path:
    """BLEU by source length of evaluated runs (RUN_DIR/eval/SPLIT.json, from `Run.evaluate`) on one figure
    (default runs/plots/SPLIT_bleu_by_length.png)."""
    split = _choice("split", split, SPLITS)
    runs = {name: _bleu_by_length(run / "eval" / f"{split}.json") for name, run in _run_names(run_dirs).items()}
    return plot_bleu_by_length(runs, as_optional_path("out", out) or Path(f"runs/plots/{split}_bleu_by_length.png"),
                               title=f"{split} BLEU by source length")


def _bleu_by_length(path: Path) -> list[dict]:
    """The BLEU-by-length rows of an `attnlab evaluate` result file, checked: a damaged file is one line."""
    rows = read_json(path)
    if isinstance(rows, dict) and "by_length" not in rows and "bleu" not in rows:  # a perplexity or an accuracy
        raise AttnlabError(f"{path}: this run's evaluation has no BLEU by source length (a translation run's has)")
    rows = rows.get("by_length") if isinstance(rows, dict) else None
    if not is_length_rows(rows):
        raise AttnlabError(f"{path}: expected the result of attnlab evaluate (by_length: rows of bucket, sentences, "
                           "bleu)")
    return rows


# ---------------------------------------------------------------------------------------------- apps
def report(run_dirs: Sequence[str | Path], out: str | Path | None = None, split: str = "test", samples: int = 4,
           sentences: Sequence[str] | None = None, beam: int | None = None, checkpoint: str = "best",
           device: str = "cpu") -> Path:
    """One self-contained HTML page comparing runs (default runs/report.html): configs, parameter summaries,
    training curves, scores, BLEU by length, sample translations (`samples` of the split, or `sentences`) with
    heatmaps."""
    run_dirs = [as_path(f"run_dirs[{i}]", r) for i, r in enumerate(run_dirs)]
    out = as_optional_path("out", out) or Path("runs/report.html")
    sentences = None if sentences is None else as_texts("sentences", sentences)
    return build_report(run_dirs, out, split=_choice("split", split, SPLITS),
                        n_samples=as_int("samples", samples, 0, MAX_SAMPLES), sentences=sentences,
                        beam=as_optional_int("beam", beam, 1, MAX_BEAM),
                        checkpoint=_choice("checkpoint", checkpoint, CHECKPOINTS), device=str(resolve_device(device)))


def serve(run_dirs: Sequence[str | Path], host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          checkpoint: str = "best", max_chars: int = 1000, max_connections: int = 4096,
          header_timeout: float = 10.0, timeout: float = 60.0, engine: str = "torch", body_timeout: float = 10.0,
          max_connections_per_client: int = 256, explore_memory: int = EXPLORE_MEMORY,
          start: str = "explorer", allowed_hosts: Sequence[str] = ()) -> None:
    """Serves runs in the web app (`attnlab.app.server`: translate and explore in the browser, a JSON API) until
    Ctrl-C or SIGTERM. explore_memory: bytes of explorations kept for the page's follow-up fetches; start: the view
    the page opens on, "explorer" or "compare" (every translation model side by side); allowed_hosts: Host names
    answered besides this machine's loopback names and the address it listens on (a classroom's name or address:
    others get 421, against DNS rebinding)."""
    run_dirs = [as_path(f"run_dirs[{i}]", r) for i, r in enumerate(run_dirs)]
    for name, value in (("header_timeout", header_timeout), ("timeout", timeout), ("body_timeout", body_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise AttnlabError(f"{name} must be a positive number of seconds, not {value!r:.40}")
    serve_runs(run_dirs, as_text("host", host), as_int("port", port, 0, 65535), str(resolve_device(device)),
               _choice("checkpoint", checkpoint, CHECKPOINTS), as_int("max_chars", max_chars, 1, MAX_CHARS),
               as_int("max_connections", max_connections, 1, MAX_CONNECTIONS), header_timeout, timeout,
               _choice("engine", engine, ("torch", "ctranslate2")), body_timeout,
               as_int("max_connections_per_client", max_connections_per_client, 1, MAX_CONNECTIONS),
               explore_memory=as_int("explore_memory", explore_memory, 1, 2**40),
               start=_choice("start", start, START_VIEWS), allowed_hosts=as_texts("allowed_hosts", allowed_hosts))


def series_study(target: str, overrides: Mapping[str, Any] | Sequence[str] | None = None, seeds: int = 5,
                 only: str = "both", out: str | Path | None = None,
                 progress: Callable[[str], None] | None = None) -> tuple[dict, Path]:
    """The IF3270 seed's study: SimpleRNN + Dense with and without attention (`only`: "rnn", "attention" or
    "both") trained over seeds 1..seeds on a series task ("fib"/"fibonacci", "sine") or a series config file;
    returns the results (also in OUT/results.json; default OUT runs/series/<task>) and OUT. progress: called
    with each run's line."""
    sets, target = override_list(overrides), as_text("target", target)
    seeds, only = as_int("seeds", seeds, 1, MAX_SEEDS), _choice("only", only, ("both", *SERIES_VARIANTS))
    out = as_optional_path("out", out)
    task = {"fib": "fibonacci"}.get(target, target)
    if task in SERIES_TASKS:
        cfg = load_series_config(None, [f"series.task={task}", *sets])
    else:  # a config file, or a packaged config by its bare name (seed-fib-attention), as every command takes one
        try:
            path = resolve_config(target)
        except AttnlabError:
            raise AttnlabError(f"series.task: {target!r} is not one of {', '.join(SERIES_TASKS)} (or fib), nor a "
                               "config file or a packaged config (`attnlab configs` lists them)") from None
        cfg = load_series_config(path, sets)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    variants = tuple(SERIES_VARIANTS.values()) if only == "both" else (SERIES_VARIANTS[only],)
    out = out or Path("runs/series") / cfg.series.task
    results = study.compare(cfg, list(range(1, seeds + 1)), out, variants, log=progress or log.info)
    return results, out


format_series_study = study.format_comparison


def demo(config: str | Path = "demo", out: str | Path = "runs/demo", beam: int = 5, procs: int = 1,
         overrides: Mapping[str, Any] | Sequence[str] | None = None) -> Iterator[str]:
    """The main job on the default data (`attnlab demo`, `make demo`): prepare the corpus, train a translation
    config into `out` (replaced) with `procs` processes, translate sample test verses, score the test set (beam)
    in each English rendering, plot one verse's attention and write the run's HTML report. Checks its arguments
    at once, then yields the text of each step as the step finishes."""
    sets, config, out = override_list(overrides), as_path("config", config), as_path("out", out)
    beam, procs = as_int("beam", beam, 1, MAX_BEAM), as_int("procs", procs, 1, MAX_PROCS)
    family, cfg, _ = typed_config(config, sets)
    if "translate" not in family.abilities:
        raise AttnlabError(f"{config}: the demo trains a translation config, not a {family.title} one")
    return _demo_steps(config, cfg, out, beam, procs, sets)


def _demo_steps(config: Path, cfg: Any, out: Path, beam: int, procs: int, sets: list[str]) -> Iterator[str]:
    english = " + ".join(r.upper() for r in cfg.data.renderings)
    yield (f"== attnlab demo: the English ({english}) -> Spanish (Reina-Valera 1909) Bible ==" if english else
           f"== attnlab demo: {config} ==")
    store = prepare_corpus(cfg)  # what `train` would do first; shown here with its statistics
    yield format_store_stats(store)
    if out.exists():
        shutil.rmtree(out)  # the demo's own output from an earlier run
    yield (f"\n== training {config} into {out} ({cfg.model.rnn.attention} attention, "
           f"{cfg.train.max_minutes:g} minutes, {procs} process{'es' if procs > 1 else ''}) ==")
    if procs > 1:
        train_processes(procs, config, out, overrides=sets)
        run = load(out)
    else:
        run = train(cfg, out)
    yield "\n== sample test translations (beam 5) =="
    samples = [p for p in store.pairs("test") if len(p.src.split()) <= 16][:: 40][:DEMO_SAMPLES]
    for p, t in zip(samples, run.translate([p.src for p in samples], beam=5)):
        yield f"[{p.ref}]\n  en:  {p.src}\n  ref: {p.tgt}\n  out: {t}"
    yield "\n== test set =="
    yield format_seq2seq_eval(run.evaluate("test", beam=beam))
    for source in [e for e in ENGLISH_MODULES if cfg.data.renderings and e != cfg.data.renderings[0]]:
        trained = "trained on" if source in cfg.data.renderings else "not trained on"
        yield f"\n== the same test verses in the {source.upper()} wording ({trained}) =="
        try:
            yield format_seq2seq_eval(run.evaluate("test", beam=beam, source=source)).splitlines()[0]
        except AttnlabError as e:  # e.g. its SWORD module is not installed
            yield f"not scored: {e}"
    p = samples[0]
    t = run.translations([p.src], beam=5, need_weights=True)[0][0]
    if t.attention is not None:
        heatmap = plot_heatmap(t.attention.numpy(), t.src_tokens, t.tgt_tokens, out / "plots" / "demo_attention.png",
                               title=f"{p.ref}: {p.src} -> {t.text}")
        yield f"\nattention heatmap of {p.ref}: {heatmap}"
    yield f"HTML report of the run: {build_report([out], out / 'report.html', split='test', beam=beam)}"
    yield (f"run directory: {out}\ntranslate your own: echo 'And God said' | attnlab translate {out}\n"
           f"plot any sentence: attnlab plot attention {out} --sentence 'In the beginning was the Word'\n"
           f"explore in the browser: attnlab serve {out}   (then open http://127.0.0.1:8000/)\n"
           f"from Python (a notebook): run = attnlab.load({str(out)!r}); run.explore('And God said')")
