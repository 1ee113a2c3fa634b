"""What each `attnlab` command does, one `cmd_*` function per command (`attnlab.app.cli` parses the arguments and
calls them): each calls the Python API (`attnlab.app.api`; of attnlab it imports only that and `attnlab.core`,
import-linter's contract "the command line goes through the API") and prints the result to stdout, its progress and
hints to stderr; a user mistake is an `AttnlabError`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

from attnlab.app import api
from attnlab.app.api import summary  # by name: tests replace commands.summary to fake a crash
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, read_lines


def _wrote(directory: Path, columns: str) -> None:
    print(f"wrote {directory}/{{train,dev,test}}.tsv ({columns})", file=sys.stderr)


def cmd_data(args: argparse.Namespace) -> None:
    if args.source == "bible":
        t0 = time.perf_counter()
        corpus = api.bible_corpus(args.english, refresh=args.refresh)
        print(f"loaded {corpus.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    elif args.source == "tsv":
        corpus = api.file_corpus(args.file, args.dev, args.test, dev_size=args.dev_size, test_size=args.test_size)
    else:
        corpus = api.file_corpus((args.src, args.tgt), dev_size=args.dev_size, test_size=args.test_size)
    if getattr(args, "export", None):
        _wrote(args.export, api.export_tsv(corpus, args.export))
    stats = api.corpus_statistics(corpus, args.tokenizer, args.vocab_size, not args.separate_vocab,
                                  args.save_tokenizer)
    print(json.dumps(stats, indent=2) if args.json else api.format_corpus_stats(stats))


def cmd_data_prepare(args: argparse.Namespace) -> None:
    """Prepare a translation config's corpus once (`api.prepare`): what `attnlab train` otherwise does on first
    use."""
    store = api.prepare(args.config, args.set, out=args.out, force=args.force)
    print(json.dumps(store.stats(), indent=2) if args.json else api.format_store_stats(store))
    if args.out:
        print(f"train from it: attnlab train {args.config} --set data.store={args.out}", file=sys.stderr)


def cmd_data_paraphrase(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    corpus = api.paraphrase_corpus(args.seed, refresh=args.refresh, hard_negatives=args.hard_negatives)
    print(f"built the paraphrase pairs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.export:
        _wrote(args.export, api.export_tsv(corpus, args.export))
    stats = api.paraphrase_stats(corpus)
    print(json.dumps(stats, indent=2) if args.json else api.format_paraphrase_stats(stats))


# ---------------------------------------------------------------------------------------------- runs
def cmd_train(args: argparse.Namespace) -> None:
    """Any family: the config (or the resumed run) says which. --procs N: N data-parallel processes. `attnlab
    paraphrase train` is this command for a pair config (require_ability "classify"). --init RUN_DIR: the override
    pretrained.init=RUN_DIR of a translation config (fine-tuning that run)."""
    init = getattr(args, "init", None)  # `attnlab paraphrase train` has no --init
    if args.resume:
        if init is not None:
            raise AttnlabError("--init starts a new run from another one; --resume continues a run (its config "
                               "already names the run it started from)")
        run_dir = args.out or args.config  # `attnlab train --resume RUN_DIR`
        if run_dir is None:
            raise AttnlabError("--resume needs the run directory: attnlab train --resume RUN_DIR")
        if args.procs > 1:
            return api.train_processes(args.procs, None, run_dir, resume=True, overrides=args.set)
        api.train(None, run_dir, resume=True, overrides=args.set)
        return
    if args.config is None:
        raise AttnlabError("give a config: a file or a packaged config's name, e.g. attnlab train "
                           "bible-rnn-bahdanau (attnlab configs lists them)")
    sets = list(args.set)
    if init is not None:
        family = api.typed_config(args.config, sets)[0]
        if "translate" not in family.abilities:
            raise AttnlabError(f"--init fine-tunes a translation run; {args.config} is a {family.title} config")
        init = api.run_path(init)  # pretrained:NAME is a shipped model's run directory
        sets.append(f"pretrained.init={json.dumps(str(init))}")  # a JSON string is a YAML string: any path
    typed = api.typed_config(args.config, sets)  # read and typed once, before any slow work
    if getattr(args, "require_ability", None) and args.require_ability not in typed.family.abilities:
        raise AttnlabError(f"{args.config} is a {typed.family.title} config, not a paraphrase one; use attnlab "
                           "train")
    out = args.out or Path("runs") / typed.name
    if args.procs > 1:
        api.train_processes(args.procs, args.config, out, overrides=sets)
    else:
        api.train(typed, out)
    print(f"run directory: {out}")


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Any family: BLEU/chrF, perplexity, accuracy or MSE, as the run's family evaluates. `attnlab paraphrase
    evaluate` is this command for a pair run."""

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
    paths, p_same = api.plot_alignment(run, args.a, args.b, args.out, args.formats)
    print("\n".join(str(p) for p in paths))
    print(f"P(same verse) = {p_same:.4f}", file=sys.stderr)


def demo_procs() -> int:
    """The demo's training processes by default (--procs 0): two 1-thread processes on a CPU with two or more
    cores (on the 2-core CPU they reached a higher test BLEU in the 7 minutes than one 2-thread process:
    docs/results.md, issue 23), one process on a GPU."""
    return 2 if (os.cpu_count() or 1) >= 2 and not torch.cuda.is_available() else 1


def cmd_demo(args: argparse.Namespace) -> None:
    """The main job on the default data (`api.demo`): corpus statistics, then train, translate and evaluate a
    model; each step's text as it finishes."""
    for text in api.demo(args.config, args.out, args.beam, args.procs or demo_procs(), args.set):
        print(text, flush=True)


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
    if not args.copy:
        sys.stdout.write(api.config_path(args.name).read_text(encoding="utf-8"))
        return
    dest = api.copy_config(args.name, args.copy)
    print(dest)
    print(f"edit it, then: attnlab train {dest}", file=sys.stderr)


def _stdin(args: argparse.Namespace) -> bool:
    return args.input is None or str(args.input) == "-"


def _decode_line(data: bytes, line: int) -> str:
    """One or more input lines of stdin from line number `line` on, as UTF-8 text with a BOM at the start of line 1
    removed (as `read_lines` reads a file, so a pipe, a terminal and a file give the same translations); invalid
    bytes are an AttnlabError naming the line of stdin."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line += data[: e.start].count(b"\n")
        raise AttnlabError(f"<stdin>:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x})") from None
    return text[1:] if line == 1 and text.startswith("\ufeff") else text


def _read_inputs(args: argparse.Namespace) -> list[str]:
    if _stdin(args):
        text = _decode_line(sys.stdin.buffer.read(), 1)
        # as read_lines splits a file: at "\n" only (splitlines also breaks at \x0b, \x1c, \x85, \u2028, ...), so
        # every input line gets one output line
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return [line.rstrip("\r") for line in lines]
    return read_lines(args.input)


def _translation_rows(run: api.Run, lines: list[str], args: argparse.Namespace, first: int = 0) -> list[str]:
    """The output lines for input lines: one each (control characters escaped, `attnlab.data.tokenizers.one_line`),
    or with --n-best N, N lines "index<TAB>score<TAB>text" each (index counted from `first`)."""
    rows = []
    for i, nbest in enumerate(run.translations(lines, beam=args.beam, n_best=args.n_best), start=first):
        if args.n_best == 1:
            rows.append(api.one_line(nbest[0].text) if nbest else "")
        else:
            rows += [f"{i}\t{t.score:.4f}\t{api.one_line(t.text)}" for t in nbest]
    return rows


def cmd_translate(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device, args.engine, args.ct2_model, args.amp,
                   args.batch_size)
    run.require("translate")
    if _stdin(args) and sys.stdin.isatty() and not args.output:
        # a person typing: each line is answered when it is entered (files and pipes, and --output, are read whole
        # and batched; the search gives each sentence the same translation alone or in a batch)
        if run.renderings:
            print(f"{args.run_dir}: trained on English {' + '.join(run.renderings)}; type a sentence and press "
                  "Enter, Ctrl-D to end", file=sys.stderr, flush=True)
        for number, data in enumerate(iter(sys.stdin.buffer.readline, b""), start=1):
            line = _decode_line(data, number).rstrip("\n").rstrip("\r")
            sys.stdout.write("".join(row + "\n" for row in _translation_rows(run, [line], args, number - 1)))
            sys.stdout.flush()
        return
    text = "".join(row + "\n" for row in _translation_rows(run, _read_inputs(args), args))
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_export(args: argparse.Namespace) -> None:
    print(api.export_run(args.run_dir, args.out, args.quantization, args.checkpoint, args.to))


def cmd_average(args: argparse.Namespace) -> None:
    print(api.average_run(args.run_dir, args.last, args.out))


def cmd_import(args: argparse.Namespace) -> None:
    print(api.import_run(args.src, args.out))


def cmd_generate(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device)
    run.require("generate")
    for prompt in args.prompt or [""]:
        for text, logprob in run.generate(prompt, args.num, args.max_len, args.temperature, args.top_k, args.top_p,
                                          args.seed, scores=True, control=args.control):
            if args.control:  # the text as generated, newlines included; a blank line ends each sample
                print(f"{logprob:.2f}\t{text}" if args.scores else text, end="\n\n")
            else:
                print(f"{logprob:.2f}\t{api.one_line(text)}" if args.scores else api.one_line(text))


def cmd_series(args: argparse.Namespace) -> None:
    results, out = api.series_study(args.target, args.set, args.seeds, args.only, args.out,
                                    progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(results, indent=2) if args.json else api.format_series_study(results))
    print(f"results: {out / 'results.json'}", file=sys.stderr)


def cmd_plot_attention(args: argparse.Namespace) -> None:
    run = api.load(args.run_dir, args.checkpoint, args.device)
    paths, translation = api.plot_attention(run, args.sentence, args.out, args.beam, args.formats, args.layer,
                                            args.head)
    print("\n".join(str(p) for p in paths))
    print(f"translation: {translation}", file=sys.stderr)


def cmd_plot_explore(args: argparse.Namespace) -> None:
    """Every attention of a run for one input, as the explorer's views in files (`api.write_views`). --layer,
    --head and --query count from 1 here (--layer -1: the last), from 0 in the API."""

    sentence, sentence_b = api.normalize(args.sentence), api.normalize(args.sentence_b or "") or None
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
    paths = api.write_views(ex, out, [k for k in (args.map or "").split(",") if k], args.view.split(","),
                            args.layer - 1 if args.layer > 0 else args.layer, head, args.words,
                            args.formats, None if args.query is None else args.query - 1)
    print("\n".join(str(p) for p in paths))
    print(api.format_decoding(ex), file=sys.stderr)


def cmd_plot_runs(args: argparse.Namespace) -> None:
    if args.what == "curves":
        print(api.plot_curves_of(args.run_dirs, args.out))
    else:
        print(api.plot_bleu_by_length_of(args.run_dirs, args.split, args.out))


def cmd_report(args: argparse.Namespace) -> None:
    print(api.report(args.run_dirs, args.out, split=args.split, samples=args.samples, sentences=args.sentence,
                     beam=args.beam, checkpoint=args.checkpoint, device=args.device))


def cmd_pretrained(args: argparse.Namespace) -> None:
    """The shipped trained models: a table (or JSON), or one model's card."""
    if args.name is not None:
        sys.stdout.write(api.pretrained_card(args.name))
        return
    models = api.pretrained_models()
    if args.json:
        print(json.dumps([dataclasses.asdict(m) for m in models], indent=2))
        return
    if not models:
        raise AttnlabError("this attnlab was installed without its trained models (attnlab.runs.shipped)")
    print(f"{'NAME':<12} {'FAMILY':<12} {'BLEU kjv':>8} {'BLEU web':>8} {'MB':>5}  TITLE")
    for m in models:
        print(f"{m.name:<12} {m.family:<12} {m.bleu.get('kjv', float('nan')):>8.2f} "
              f"{m.bleu.get('web', float('nan')):>8.2f} {m.megabytes:>5.1f}  {m.title}")
    print("\nuse one as pretrained:NAME: attnlab translate pretrained:NAME, attnlab serve --pretrained; test BLEU: "
          "beam 5 on the 918 test verses, from the KJV and from the WEB English", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> None:
    run_dirs = list(args.run_dirs) + ([f"pretrained:{name}" for name in api.pretrained_names()]
                                      if args.pretrained else [])
    if not run_dirs:
        raise AttnlabError("serve needs a RUN_DIR, pretrained:NAME or --pretrained")
    api.serve(run_dirs, args.host, args.port, args.device, args.checkpoint, args.max_chars,
              args.max_connections, args.header_timeout, args.timeout, args.engine, args.body_timeout,
              args.max_connections_per_client, explore_memory=args.explore_memory * 2**20,
              start="compare" if args.pretrained else "explorer", allowed_hosts=args.allowed_host)
