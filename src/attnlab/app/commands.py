"""What each `attnlab` command does, one `cmd_*` function per command (`attnlab.app.cli` parses the arguments and
calls them). Each prints its result to stdout and raises `AttnlabError` for a user mistake."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlab.app import api
from attnlab.app.report import build_report
from attnlab.app.server import serve
from attnlab.app.study import compare, format_comparison
from attnlab.app.views import format_decoding, write_views
from attnlab.app.workflow import export_run, import_run, run_config, summary
from attnlab.core.devices import resolve_device
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, read_json, read_lines
from attnlab.core.logs import read_metrics
from attnlab.core.plotting import plot_attention, plot_attention_grid, plot_bleu_by_length, plot_curves
from attnlab.data.bible import ENGLISH_MODULES, bible_corpus
from attnlab.data.corpus import corpus_stats, file_corpus, format_stats, normalize
from attnlab.data.paraphrase import format_paraphrase_stats, paraphrase_corpus, paraphrase_stats
from attnlab.data.store import format_store_stats
from attnlab.data.tokenizers import cached_tokenizers, one_line, save_tokenizers
from attnlab.families.pairs import plot_alignment
from attnlab.families.series import VARIANTS, load_series_config
from attnlab.families.table import FAMILIES, load_family_config
from attnlab.families.translation import format_seq2seq_eval, prepare_corpus


def _output_stem(path: Path) -> Path:
    """An output path the formats' suffixes are put on; it must name a file, not end in a folder's name."""
    if path.name in ("", ".", ".."):
        raise AttnlabError(f"--out {str(path)!r}: give a file path (the format's suffix is added to it)")
    return path


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
    """Prepare a translation config's corpus once (`attnlab.data.prepare`): what `attnlab train` otherwise does on first
    use."""
    family, cfg = load_family_config(args.config, args.set)
    if "translate" not in family.abilities:
        names = " or ".join(sorted(f.name for f in FAMILIES if "translate" in f.abilities))
        raise AttnlabError(f"{args.config} is a {family.title} config; `attnlab data prepare` prepares the corpus of "
                           f"a translation config (model.family {names})")
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
    if getattr(args, "require_ability", None) and args.require_ability not in family.abilities:
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
           "-m", "attnlab.app.cli", "train", *train_args, *(x for s in sets for x in ("--set", s))]
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
        if args.n_best == 1:  # one line per input line: control characters escaped (attnlab.data.tokenizers.one_line)
            rows.append(one_line(nbest[0].text) if nbest else "")
        else:
            rows += [f"{i}\t{t.score:.4f}\t{one_line(t.text)}" for t in nbest]
    text = "".join(row + "\n" for row in rows)
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_export(args: argparse.Namespace) -> None:
    print(export_run(args.run_dir, args.out, args.quantization, args.checkpoint, args.to))


def cmd_import(args: argparse.Namespace) -> None:
    print(import_run(args.src, args.out))


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
    variants = tuple(VARIANTS.values()) if args.only == "both" else (VARIANTS[args.only],)
    out = args.out or Path("runs/series") / cfg.series.task
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
    """Every attention of a run for one input, as the explorer's views in files (`attnlab.app.explore`)."""

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