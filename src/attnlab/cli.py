"""The `attnlab` command line. Every user mistake ends as one line on stderr and exit code 2.

The CLI prints results to stdout; library code logs progress and messages to stderr (`attnlab.logs`). Model
families are looked up once, from the config or the run directory (`attnlab.families`), and every family goes
through the same run pipeline (`attnlab.workflow`).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime
from pathlib import Path

import torch

from attnlab import api
from attnlab.config import MAX_BEAM, MAX_COUNT, MAX_LAYERS, MAX_LEN, MAX_SAMPLES, MAX_SEED, MAX_VOCAB
from attnlab.bible import ENGLISH_MODULES, bible_corpus
from attnlab.corpus import cache_dir, corpus_stats, file_corpus, format_stats, normalize
from attnlab.devices import resolve_device
from attnlab.errors import AttnlabError
from attnlab.experiment import format_seq2seq_eval, prepare_corpus
from attnlab.views import format_decoding, write_views
from attnlab.families import load_family_config
from attnlab.fileio import atomic_write_text, make_dirs, read_json, read_lines
from attnlab.logs import read_metrics, setup_logging
from attnlab.pairs import plot_alignment
from attnlab.paraphrase import format_paraphrase_stats, paraphrase_corpus, paraphrase_stats
from attnlab.plotting import (plot_attention, plot_attention_grid, plot_bleu_by_length, plot_curves,
                              supported_formats)
from attnlab.report import build_report
from attnlab.series import load_series_config
from attnlab.server import serve
from attnlab.store import format_store_stats
from attnlab.study import compare, format_comparison
from attnlab.tokenizers import cached_tokenizers, one_line, save_tokenizers
from attnlab.translate import DecodeConfig
from attnlab.workflow import export_run, run_config, summary

DEVICES = ("auto", "cpu", "cuda", "mps")
NESTED_COMMANDS = ("data", "paraphrase", "plot")  # commands with sub-commands of their own
# Limits of the numeric options without a config key of their own (the others share config.py's): each far beyond
# a useful value and small enough that nothing they size (a batch of samples, a list of seeds) exhausts memory.
MAX_SUMMARY_LEN = 4096  # summary --src-len/--tgt-len: a dummy batch
MAX_CHARS = 10**6  # serve --max-chars
MAX_CONNECTIONS = 10**6  # serve --max-connections
MAX_SEEDS = 1000  # series --seeds
MAX_PROCS = 1024  # train --procs
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


def _report(corpus, args) -> None:
    toks = None
    if args.tokenizer != "none":
        toks = cached_tokenizers(corpus, args.tokenizer, args.vocab_size, not args.separate_vocab)
        if args.save_tokenizer:
            save_tokenizers(toks, args.save_tokenizer)
    stats = corpus_stats(corpus, toks)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))


def _export(rows_by_split: dict[str, list[str]], directory: Path, columns: str) -> None:
    for split, rows in rows_by_split.items():
        atomic_write_text(directory / f"{split}.tsv", "".join(r + "\n" for r in rows))
    print(f"wrote {directory}/{{train,dev,test}}.tsv ({columns})", file=sys.stderr)


def cmd_data(args: argparse.Namespace) -> None:
    if args.source == "bible":
        t0 = time.perf_counter()
        corpus = bible_corpus(args.english, refresh=args.refresh)
        print(f"loaded {corpus.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    elif args.source == "tsv":
        corpus = file_corpus(args.file, args.dev, args.test, dev_size=args.dev_size, test_size=args.test_size)
    else:
        corpus = file_corpus((args.src, args.tgt), dev_size=args.dev_size, test_size=args.test_size)
    if getattr(args, "export", None):
        _export({split: [f"{p.src}\t{p.tgt}\t{p.ref}" for p in corpus.split(split)]
                 for split in ("train", "dev", "test")}, args.export, "source, target, reference")
    _report(corpus, args)


def cmd_data_prepare(args: argparse.Namespace) -> None:
    """Prepare a translation config's corpus once (`attnlab.prepare`): what `attnlab train` otherwise does on first
    use."""
    family, cfg = load_family_config(args.config, args.set)
    if "translate" not in family.abilities:
        raise AttnlabError(f"{args.config} is a {family.title} config; `attnlab data prepare` prepares the corpus of "
                           "a translation config (model.family rnn or transformer)")
    store = prepare_corpus(cfg, out=args.out, force=args.force)
    print(json.dumps(store.stats(), indent=2) if args.json else format_store_stats(store))
    if args.out:
        print(f"train from it: attnlab train {args.config} --set data.store={args.out}", file=sys.stderr)


def cmd_data_paraphrase(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    corpus = paraphrase_corpus(args.seed, refresh=args.refresh, hard_negatives=args.hard_negatives)
    print(f"built the paraphrase pairs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.export:
        _export({split: [f"{p.a}\t{p.b}\t{p.label}\t{p.kind}\t{p.ref_a}\t{p.ref_b}" for p in corpus.split(split)]
                 for split in ("train", "dev", "test")}, args.export, "a, b, label, kind, ref_a, ref_b")
    stats = paraphrase_stats(corpus)
    print(json.dumps(stats, indent=2) if args.json else format_paraphrase_stats(stats))


# ---------------------------------------------------------------------------------------------- runs
def cmd_train(args: argparse.Namespace) -> None:
    """Any family: the config (or the resumed run) says which. --procs N: N data-parallel processes."""

    if args.resume:
        run_dir = args.out or args.config  # `attnlab train --resume RUN_DIR`
        if run_dir is None:
            raise AttnlabError("--resume needs the run directory: attnlab train --resume RUN_DIR")
        if args.procs > 1:
            threads = run_config(run_dir)[1].get("train", {}).get("num_threads", 0)
            return _train_ranks(args.procs, ["--resume", str(run_dir)], args.set, threads)
        api.train(None, run_dir, resume=True, overrides=args.set)
        return
    if args.config is None:
        raise AttnlabError("give a config: a file or a packaged config's name, e.g. attnlab train "
                           "bible-rnn-bahdanau (attnlab configs lists them)")
    family, cfg, name = api.typed_config(args.config, args.set)  # checked before any slow work
    if getattr(args, "require_family", None) and family.name != args.require_family:
        raise AttnlabError(f"{args.config} is a {family.title} config, not a paraphrase one; use attnlab train")
    out = args.out or Path("runs") / name
    if args.procs > 1:
        _train_ranks(args.procs, [str(args.config), "--out", str(out)], args.set, cfg.train.num_threads)
    else:
        api.train(cfg, out)
    print(f"run directory: {out}")


def _train_ranks(procs: int, train_args: list[str], sets: list[str], threads: int) -> None:
    """`attnlab train ... --procs N` on one machine: N data-parallel ranks under torchrun (gloo on the CPU, one
    GPU each with CUDA; the same update as one process with all their batches), each given cores / N torch
    threads unless the config sets train.num_threads."""
    if os.environ.get("LOCAL_RANK") is not None:
        raise AttnlabError("--procs starts its own processes; under torchrun leave it out")
    if not threads and not any(s.split("=", 1)[0].strip() == "train.num_threads" for s in sets):
        sets = [*sets, f"train.num_threads={max(1, (os.cpu_count() or 1) // procs)}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
           "-m", "attnlab.cli", "train", *train_args, *(x for s in sets for x in ("--set", s))]
    print(f"starting {procs} training processes: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        raise AttnlabError(f"the {procs} training processes exited with status {rc} (their messages are above)")


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Any family: BLEU/chrF, perplexity, accuracy or MSE, as the run's family evaluates."""

    run = api.load(args.run_dir, args.checkpoint, args.device, decode_amp=getattr(args, "amp", None),
                   decode_batch_size=getattr(args, "batch_size", None))
    source = getattr(args, "source", None)
    sources = [source] if source or len(run.renderings) < 2 else run.renderings  # default: each trained on
    results = [run.evaluate(args.split, getattr(args, "beam", None), getattr(args, "max_sentences", 0),
                            getattr(args, "hard_negatives", None), s) for s in sources]
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print("\n\n".join(run.format_eval(r) for r in results))


def cmd_summary(args: argparse.Namespace) -> None:
    print(summary(args.target, args.set, args.src_len, args.tgt_len))


def cmd_paraphrase_plot(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device)
    run.require("classify")
    out = args.out or args.run_dir / "plots" / "alignment"
    paths, p_same = plot_alignment(run.loaded, args.a, args.b, _output_stem(out), tuple(args.formats))
    print("\n".join(str(p) for p in paths))
    print(f"P(same verse) = {p_same:.4f}", file=sys.stderr)


def demo_procs() -> int:
    """The demo's training processes by default: two 1-thread processes on a CPU with two or more cores (on the
    2-core CPU they reached test BLEU 18.04 in the 7 minutes, against 15.83-16.39 for one 2-thread process:
    docs/results.md, issue 23), one process on a GPU."""
    return 2 if (os.cpu_count() or 1) >= 2 and not torch.cuda.is_available() else 1


def cmd_demo(args: argparse.Namespace) -> None:
    """The main job on the default data: corpus statistics, then train, translate and evaluate a model."""
    family, cfg, _ = api.typed_config(args.config, args.set)
    if "translate" not in family.abilities:
        raise AttnlabError(f"{args.config}: the demo trains a translation config, not a {family.title} one")
    english = " + ".join(r.upper() for r in cfg.data.renderings)
    print(f"== attnlab demo: the English ({english}) -> Spanish (Reina-Valera 1909) Bible ==" if english else
          f"== attnlab demo: {args.config} ==", flush=True)
    store = prepare_corpus(cfg)  # what `attnlab train` would do first; printed here with its statistics
    print(format_store_stats(store), flush=True)
    out = args.out
    if out.exists():
        shutil.rmtree(out)  # the demo's own output from an earlier run
    procs = args.procs if args.procs else demo_procs()
    print(f"\n== training {args.config} into {out} ({cfg.model.rnn.attention} attention, "
          f"{cfg.train.max_minutes:g} minutes, {procs} process{'es' if procs > 1 else ''}) ==", flush=True)
    if procs > 1:
        _train_ranks(procs, [str(args.config), "--out", str(out)], args.set, cfg.train.num_threads)
        run = api.load(out)
    else:
        run = api.train(cfg, out)
    print("\n== sample test translations (beam 5) ==")
    samples = [p for p in store.pairs("test") if len(p.src.split()) <= 16][:: 40][:6]
    for p, t in zip(samples, run.translate([p.src for p in samples], beam=5)):
        print(f"[{p.ref}]\n  en:  {p.src}\n  ref: {p.tgt}\n  out: {t}")
    print("\n== test set ==", flush=True)
    print(format_seq2seq_eval(run.evaluate("test", beam=args.beam)))
    for source in [e for e in ENGLISH_MODULES if cfg.data.renderings and e != cfg.data.renderings[0]]:
        trained = "trained on" if source in cfg.data.renderings else "not trained on"
        print(f"\n== the same test verses in the {source.upper()} wording ({trained}) ==", flush=True)
        try:
            print(format_seq2seq_eval(run.evaluate("test", beam=args.beam, source=source)).splitlines()[0])
        except AttnlabError as e:  # e.g. its SWORD module is not installed
            print(f"not scored: {e}")
    p = samples[0]
    t = run.translations([p.src], beam=5, need_weights=True)[0][0]
    if t.attention is not None:
        heatmap = plot_attention(t.attention.numpy(), t.src_tokens, t.tgt_tokens, out / "plots" / "demo_attention.png",
                                 title=f"{p.ref}: {p.src} -> {t.text}")
        print(f"\nattention heatmap of {p.ref}: {heatmap}")
    report = build_report([out], out / "report.html", split="test", beam=args.beam)
    print(f"HTML report of the run: {report}")
    print(f"run directory: {out}\ntranslate your own: echo 'And God said' | attnlab translate {out}\n"
          f"plot any sentence: attnlab plot attention {out} --sentence 'In the beginning was the Word'\n"
          f"explore in the browser: attnlab serve {out}   (then open http://127.0.0.1:8000/)\n"
          f"from Python (a notebook): run = attnlab.load({str(out)!r}); run.explore('And God said')")


def cmd_configs(args: argparse.Namespace) -> None:
    """The packaged configs: list them, print one, or copy one out to edit."""
    if args.name is None:
        if args.copy:
            raise AttnlabError("--copy needs a config's name: attnlab configs NAME --copy [DEST]")
        infos = api.configs()
        width = max(len(c.name) for c in infos)
        for c in infos:
            print(f"{c.name:<{width}}  {c.family:<11}  {c.description}")
        print(f"\n{len(infos)} packaged configs (in {api.PACKAGED_CONFIGS}); use one by name: attnlab train NAME; "
              "copy one to edit: attnlab configs NAME --copy", file=sys.stderr)
        return
    path = api.config_path(args.name)
    if not args.copy:
        sys.stdout.write(path.read_text(encoding="utf-8"))
        return
    dest = Path(args.copy)
    if dest.is_dir():
        dest = dest / path.name
    if dest.exists():
        raise AttnlabError(f"{dest} exists; choose another destination or remove it first")
    atomic_write_text(dest, path.read_text(encoding="utf-8"))
    print(dest)
    print(f"edit it, then: attnlab train {dest}", file=sys.stderr)


def _read_inputs(args: argparse.Namespace) -> list[str]:
    if args.input is None or str(args.input) == "-":
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise AttnlabError(f"<stdin>:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x})") from None
        # as read_lines splits a file: at "\n" only (splitlines also breaks at \x0b, \x1c, \x85, \u2028, ...), so
        # every input line gets one output line
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line.rstrip("\r") for line in lines]
    return read_lines(args.input)


def cmd_translate(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device, args.engine, args.ct2_model, args.amp,
                   args.batch_size)
    run.require("translate")
    if run.renderings and sys.stdin.isatty() and (args.input is None or str(args.input) == "-"):
        print(f"{args.run_dir}: trained on English {' + '.join(run.renderings)}; type sentences, end with Ctrl-D",
              file=sys.stderr, flush=True)
    lines = _read_inputs(args)
    rows = []
    for i, nbest in enumerate(run.translations(lines, beam=args.beam, n_best=args.n_best)):
        if args.n_best == 1:  # one line per input line: control characters escaped (attnlab.tokenizers.one_line)
            rows.append(one_line(nbest[0].text) if nbest else "")
        else:
            rows += [f"{i}\t{t.score:.4f}\t{one_line(t.text)}" for t in nbest]
    text = "".join(row + "\n" for row in rows)
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_export(args: argparse.Namespace) -> None:
    print(export_run(args.run_dir, args.out, args.quantization, args.checkpoint))


def cmd_generate(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device)
    run.require("generate")
    for prompt in args.prompt or [""]:
        for text, logprob in run.generate(prompt, args.num, args.max_len, args.temperature, args.top_k, args.top_p,
                                          args.seed, scores=True):
            print(f"{logprob:.2f}\t{one_line(text)}" if args.scores else one_line(text))


def cmd_series(args: argparse.Namespace) -> None:
    if args.target.endswith((".toml", ".yaml", ".yml", ".json")):
        cfg = load_series_config(args.target, args.set)
    else:
        task = {"fib": "fibonacci"}.get(args.target, args.target)
        cfg = load_series_config(None, [f"series.task={task}", *args.set])
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    variants = {"both": (False, True), "rnn": (False,), "attention": (True,)}[args.only]
    out = args.out or Path("runs") / "series" / cfg.series.task
    results = compare(cfg, list(range(1, args.seeds + 1)), out, variants,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(results, indent=2) if args.json else format_comparison(results))
    print(f"results: {out / 'results.json'}", file=sys.stderr)


def _index(value: str, n: int, flag: str) -> int:
    """A 1-based (or negative, from the end) layer/head number from the command line, as a 0-based index."""
    try:
        i = int(value)
    except ValueError:
        raise AttnlabError(f"{flag} {value!r}: give a number (1..{n}, -1 for the last) or 'all'") from None
    if not (1 <= i <= n or -n <= i <= -1):
        raise AttnlabError(f"{flag} {i} is out of range: the model has {n}")
    return i - 1 if i > 0 else n + i


def cmd_plot_attention(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device)
    translator = run.translator
    sentence = normalize(args.sentence)
    if not sentence:
        raise AttnlabError("--sentence is empty")
    t = translator.translate([sentence], beam_size=args.beam, need_weights=True)[0][0]
    if t.attention is None:
        raise AttnlabError(f"{args.run_dir}: this model has no attention to plot (attention = 'none')")
    out = _output_stem(args.out or args.run_dir / "plots" / "attention.png")
    title = f"{sentence} -> {t.text}"
    att = t.attention.numpy()  # RNN: (T, S); Transformer: (T, layers, heads, S)
    for suffix in args.formats:
        path = out.with_suffix("." + suffix)
        if att.ndim == 2:
            plot_attention(att, t.src_tokens, t.tgt_tokens, path, title=title)
        else:
            n_layers, n_heads = att.shape[1], att.shape[2]
            layers = range(n_layers) if args.layer == "all" else [_index(args.layer, n_layers, "--layer")]
            heads = range(n_heads) if args.head == "all" else [_index(args.head, n_heads, "--head")]
            grid = [att[:, l, h] for l in layers for h in heads]  # each (T, S)
            names = [f"layer {l + 1} head {h + 1}" for l in layers for h in heads]
            if len(grid) == 1:
                plot_attention(grid[0], t.src_tokens, t.tgt_tokens, path, title=f"{names[0]}: {title}")
            else:
                plot_attention_grid(grid, t.src_tokens, t.tgt_tokens, path, names, ncols=min(n_heads, 4),
                                    suptitle=f"cross-attention: {title}")
        print(path)
    print(f"translation: {t.text}", file=sys.stderr)


def cmd_plot_explore(args: argparse.Namespace) -> None:
    """Every attention of a run for one input, as the explorer's views in files (`attnlab.explore`)."""

    sentence, sentence_b = normalize(args.sentence), normalize(args.sentence_b or "") or None
    if not sentence:
        raise AttnlabError("--sentence is empty")
    if args.layer == 0 or (args.query is not None and args.query < 1):
        raise AttnlabError("--layer and --query count from 1 (--layer -1: the last layer)")
    head = args.head
    if head != "mean":
        if not head.isdigit() or int(head) < 1:
            raise AttnlabError(f"--head {head!r}: give a head number from 1, or mean")
        head = str(int(head) - 1)
    ex = api.load(args.run_dir, args.checkpoint, args.device).explore(sentence, sentence_b, args.beam, args.max_new)
    out = args.out or args.run_dir / "plots" / "explore"
    paths = write_views(ex, out, [k for k in (args.map or "").split(",") if k], args.view.split(","),
                        args.layer - 1 if args.layer > 0 else args.layer, head, args.words,
                        args.formats, None if args.query is None else args.query - 1)
    print("\n".join(str(p) for p in paths))
    print(format_decoding(ex), file=sys.stderr)


def cmd_plot_runs(args: argparse.Namespace) -> None:
    names = {}
    for run in args.run_dirs:
        name = run.name if run.name not in names else str(run)
        names[name] = run
    if args.what == "curves":
        runs = {}
        for name, run in names.items():
            if not (run / "metrics.jsonl").is_file():
                raise AttnlabError(f"{run}: no metrics.jsonl (not a run directory?)")
            runs[name] = read_metrics(run)
        path = plot_curves(runs, args.out or Path("runs/plots/curves.png"))
    else:
        runs = {name: _bleu_by_length(run / "eval" / f"{args.split}.json") for name, run in names.items()}
        path = plot_bleu_by_length(runs, args.out or Path(f"runs/plots/{args.split}_bleu_by_length.png"),
                                   title=f"{args.split} BLEU by source length")
    print(path)


def _bleu_by_length(path: Path) -> list[dict]:
    """The BLEU-by-length rows of an `attnlab evaluate` result file, checked: a damaged file is one line."""
    rows = read_json(path)
    rows = rows.get("by_length") if isinstance(rows, dict) else None
    if not (isinstance(rows, list) and all(
            isinstance(r, dict) and isinstance(r.get("bucket"), str) and type(r.get("sentences")) is int
            and isinstance(r.get("bleu"), (int, float)) and not isinstance(r.get("bleu"), bool) for r in rows)):
        raise AttnlabError(f"{path}: expected the result of attnlab evaluate (by_length: rows of bucket, sentences, "
                           "bleu)")
    return rows


def cmd_report(args: argparse.Namespace) -> None:
    out = args.out or Path("runs/report.html")
    path = build_report(args.run_dirs, out, split=args.split, n_samples=args.samples, sentences=args.sentence,
                        beam=args.beam, checkpoint=args.checkpoint, device=str(resolve_device(args.device)))
    print(path)


def cmd_serve(args: argparse.Namespace) -> None:
    serve(args.run_dirs, args.host, args.port, str(resolve_device(args.device)), args.checkpoint, args.max_chars,
          args.max_connections, args.header_timeout, args.timeout, args.engine, args.body_timeout,
          args.max_connections_per_client, explore_memory=args.explore_memory * 2**20)


# ---------------------------------------------------------------------------------------------- parser
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


def _output_stem(path: Path) -> Path:
    """An output path the formats' suffixes are put on; it must name a file, not end in a folder's name."""
    if path.name in ("", ".", ".."):
        raise AttnlabError(f"--out {str(path)!r}: give a file path (the format's suffix is added to it)")
    return path


def _option_groups() -> dict[str, argparse.ArgumentParser]:
    """The options several commands share, defined once (argparse parent parsers)."""
    device = argparse.ArgumentParser(add_help=False)
    device.add_argument("--device", choices=DEVICES, default="auto",
                        help="where the model runs (default: auto = a GPU if there is one)")
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
    amp = argparse.ArgumentParser(add_help=False)  # translate and evaluate
    amp.add_argument("--amp", choices=DecodeConfig.CHOICES["amp"], default=None,
                     help="translation: the precision of the search: none (fp32), auto (bf16 where the device "
                          "computes it natively), bf16 (default: the run's decode.amp, none unless set)")
    amp.add_argument("--batch-size", type=_int(*DecodeConfig.LIMITS["batch_size"]), default=None, metavar="N",
                     help="translation: sentences per search batch (default: the run's decode.batch_size, 64 unless "
                          "set); a GPU is faster with larger batches (e.g. 256), a CPU with 64")
    evaluate = argparse.ArgumentParser(add_help=False, parents=[run])
    evaluate.add_argument("--split", choices=("train", "dev", "test"), default="test")
    evaluate.add_argument("--json", action="store_true", help="print the result as JSON")
    return {"device": device, "checkpoint": checkpoint, "overrides": overrides, "train": train, "run": run,
            "evaluate": evaluate, "amp": amp}


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
    bible.add_argument("--english", choices=tuple(ENGLISH_MODULES), default="kjv",
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

    train = sub.add_parser("train", parents=[opts["train"]],
                           help="train any model family from a TOML/YAML config, or resume a run",
                           description="Train a model: the config's model.family (rnn, transformer, lm, "
                                       "decomposable, minilm) or its [series] table picks the family. Any config "
                                       "key can be overridden with --set, e.g. --set train.max_steps=200 "
                                       "--set model.rnn.cell=lstm.")
    train.set_defaults(func=cmd_train)

    para = sub.add_parser("paraphrase", help="Bible verse paraphrase identification: train, evaluate, plot",
                          description="Sentence-pair classifiers on KJV-vs-WEB verse pairs (see `attnlab data "
                                      "paraphrase`): decomposable attention (Parikh et al. 2016) or the fine-tuned "
                                      "all-MiniLM-L6-v2 encoder, chosen by the config's model.family. train and "
                                      "evaluate are `attnlab train` / `attnlab evaluate` for these runs.")
    psub_para = para.add_subparsers(dest="action", metavar="ACTION", required=True)
    ptrain = psub_para.add_parser("train", parents=[opts["train"]],
                                  help="train from a config (configs/paraphrase-*.toml), or resume",
                                  description="Train a paraphrase classifier with the one trainer (model selection "
                                              "on dev accuracy).")
    ptrain.set_defaults(func=cmd_train, require_family="pair")
    peval = psub_para.add_parser("evaluate", parents=[opts["evaluate"]],
                                 help="accuracy on a split, overall and by kind of negative",
                                 description="Accuracy of a trained run on a split: overall, on the positives, the "
                                             "hard (same chapter) and the easy (other chapter) negatives; writes "
                                             "RUN_DIR/eval/paraphrase_<split>.json and the misclassified pairs.")
    peval.add_argument("--hard-negatives", choices=("random", "overlap"),
                       help="evaluate on these hard negatives instead of the run's: random (a random verse of the "
                            "chapter) or overlap (the verse of the chapter sharing the most words with a)")
    peval.set_defaults(func=cmd_evaluate)
    pplot = psub_para.add_parser("plot", parents=[opts["run"]],
                                 help="heatmaps of the soft alignment of one pair (decomposable)",
                                 description="The soft alignment matrix of a pair: rows = tokens of a, columns = "
                                             "tokens of b; OUT.png (each row a softmax over b) and OUT_b.png (each "
                                             "column a softmax over a).")
    pplot.add_argument("--a", required=True, help="sentence a (e.g. a KJV verse)")
    pplot.add_argument("--b", required=True, help="sentence b (e.g. a WEB verse)")
    pplot.add_argument("--out", type=Path, help="output path without suffix (default RUN_DIR/plots/alignment)")
    pplot.add_argument("--formats", type=_formats, default="png,svg", help="comma-separated formats (default png,svg)")
    pplot.set_defaults(func=cmd_paraphrase_plot, device="cpu")

    tr = sub.add_parser("translate", parents=[opts["run"], opts["amp"]],
                        help="translate text with a trained run (stdin to stdout, or files)",
                        description="Translate text with a trained run, one sentence a line. The input FILE may "
                                    "stand before or after the options.")
    tr.add_argument("input", nargs="?", type=Path, metavar="FILE",
                    help="input file, one sentence a line (default or -: stdin)")
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
                        help="export a Transformer run to CTranslate2 (an inference engine, int8 on CPU)",
                        description="Write a standard CTranslate2 model directory of a Transformer translation run "
                                    "(ctranslate2.Translator loads it without attnlab; `attnlab translate "
                                    "--engine ctranslate2 --ct2-model DIR` uses it with the run's tokenizer) or of "
                                    "a decoder-only language-model run (for ctranslate2.Generator). RNN runs are "
                                    "refused: CTranslate2 has no RNN models.")
    ex.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    ex.add_argument("--to", choices=("ctranslate2",), default="ctranslate2", help="the target format")
    ex.add_argument("--quantization", default="float32",
                    choices=("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16",
                             "int8_bfloat16"), help="weight type (default float32; int8 for fast CPU decoding)")
    ex.add_argument("--out", type=Path, metavar="DIR", help="default: RUN_DIR/ctranslate2-<checkpoint>-<quantization>")
    ex.set_defaults(func=cmd_export)

    ev = sub.add_parser("evaluate", parents=[opts["evaluate"], opts["amp"]],
                        help="evaluate a trained run of any family on a split",
                        description="Evaluate a trained run on a split, as its family measures it: translation "
                                    "BLEU/chrF and BLEU by sentence length; language model perplexity; pair "
                                    "classifier accuracy; series MSE. Writes RUN_DIR/eval/.")
    ev.add_argument("--beam", type=_int(1, MAX_BEAM), default=None,
                    help="translation: beam size; 1 = greedy (default: the run's)")
    ev.add_argument("--max-sentences", type=_int(0, MAX_COUNT), default=0,
                    help="translation: only the first N sentences (0: all)")
    ev.add_argument("--source", choices=tuple(ENGLISH_MODULES), default=None,
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

    rep = sub.add_parser("report", parents=[opts["checkpoint"], opts["device"]],
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
    rep.set_defaults(func=cmd_report, device="cpu")

    srv = sub.add_parser("serve", parents=[opts["checkpoint"], opts["device"]],
                         help="web app: translate and explore attention in the browser",
                         description="Serve runs in a local web app (FastAPI + uvicorn): type a sentence, pick "
                                     "models side by side, get the translation and an interactive attention "
                                     "heatmap. JSON API: GET /api/models, POST /api/translate; schema at "
                                     "/openapi.json. Models are named by their run directory's name.")
    srv.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=_int(0, 65535), default=8000, help="TCP port (default 8000)")
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
    srv.set_defaults(func=cmd_serve, device="cpu")

    ser = sub.add_parser("series", parents=[opts["overrides"]],
                         help="many-to-one RNN regression with vs without the IF3270 attention layer",
                         description="Train SimpleRNN + Dense and SimpleRNN + attention + Dense (the IF3270 "
                                     "seed's models) on a series, over several seeds, with the one trainer, and "
                                     "print the test MSE (mean +/- std) and whether attention lowers it.")
    ser.add_argument("target", metavar="TASK_OR_CONFIG",
                     help="fib (fibonacci: the seed's 1,200 Fibonacci numbers), sine (noisy two-period sine), "
                          "or a series config file such as configs/seed-fib-attention.toml")
    ser.add_argument("--seeds", type=_int(1, MAX_SEEDS), default=5, help="train with seeds 1..N (default 5)")
    ser.add_argument("--only", choices=("both", "rnn", "attention"), default="both",
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
