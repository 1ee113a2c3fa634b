"""The `attnlab` command line. Every user mistake ends as one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from attnlab.errors import AttnlabError


# ---------------------------------------------------------------------------------------------- data
def _add_tokenizer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", choices=("unigram", "bpe", "char", "none"), default="unigram",
                   help="tokenizer to train on the train split for the token statistics (default: unigram)")
    p.add_argument("--vocab-size", type=int, default=8000, help="subword vocabulary size (default: 8000)")
    p.add_argument("--separate-vocab", action="store_true",
                   help="separate source and target vocabularies (default: one joint vocabulary)")
    p.add_argument("--save-tokenizer", type=Path, metavar="DIR", help="save the trained tokenizer to DIR")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")


def cached_tokenizers(corpus, kind: str, vocab_size: int, joint: bool):
    """Tokenizers trained on the corpus's train split, cached by corpus name and settings (the Bible corpus is
    fixed, so its tokenizer can be reused; file corpora are retrained every time)."""
    from attnlab.corpus import cache_dir
    from attnlab.tokenizers import TokenizerConfig, build_tokenizers, load_tokenizers, save_tokenizers

    cfg = TokenizerConfig(kind=kind, vocab_size=vocab_size, joint=joint)
    cacheable = corpus.name.startswith("bible-")
    where = cache_dir() / "tokenizers" / f"{corpus.name}-{kind}-{vocab_size}-{'joint' if joint else 'sep'}"
    if cacheable and (where / "tokenizer.json").is_file():
        return load_tokenizers(where)
    t0 = time.perf_counter()
    print(f"training a {kind} tokenizer on {len(corpus.train):,} train pairs ...", file=sys.stderr, flush=True)
    pair = build_tokenizers(cfg, [p.src for p in corpus.train], [p.tgt for p in corpus.train])
    print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if cacheable:
        save_tokenizers(pair, where)
    return pair


def _report(corpus, args) -> None:
    from attnlab.corpus import corpus_stats, format_stats
    from attnlab.tokenizers import save_tokenizers

    toks = None
    if args.tokenizer != "none":
        toks = cached_tokenizers(corpus, args.tokenizer, args.vocab_size, not args.separate_vocab)
        if args.save_tokenizer:
            save_tokenizers(toks, args.save_tokenizer)
    stats = corpus_stats(corpus, toks)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))


def cmd_data(args: argparse.Namespace) -> None:
    from attnlab.corpus import atomic_write_text, bible_corpus, file_corpus

    if args.source == "bible":
        t0 = time.perf_counter()
        corpus = bible_corpus(args.english, refresh=args.refresh)
        print(f"loaded {corpus.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    elif args.source == "tsv":
        corpus = file_corpus(args.file, args.dev, args.test, dev_size=args.dev_size, test_size=args.test_size)
    else:
        corpus = file_corpus((args.src, args.tgt), dev_size=args.dev_size, test_size=args.test_size)
    if getattr(args, "export", None):
        for split in ("train", "dev", "test"):
            rows = [f"{p.src}\t{p.tgt}\t{p.ref}" for p in corpus.split(split)]
            atomic_write_text(args.export / f"{split}.tsv", "".join(r + "\n" for r in rows))
        print(f"wrote {args.export}/{{train,dev,test}}.tsv (source, target, reference)", file=sys.stderr)
    _report(corpus, args)


def cmd_demo(args: argparse.Namespace) -> None:
    """The main job on the default data."""
    from attnlab.corpus import bible_corpus

    print("== attnlab demo: the English (KJV) -> Spanish (Reina-Valera 1909) Bible ==", flush=True)
    corpus = bible_corpus("kjv")
    ns = argparse.Namespace(tokenizer="unigram", vocab_size=8000, separate_vocab=False, save_tokenizer=None,
                            json=False)
    _report(corpus, ns)
    p = corpus.test[0]
    print(f"\nexample ({p.ref}):\n  en: {p.src}\n  es: {p.tgt}")


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab", description="Attention-based sequence models: build corpora, train, decode, look inside.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__import__('attnlab').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    data = sub.add_parser("data", help="build or check a parallel corpus and print its statistics",
                          description="Build or check a parallel corpus and print its statistics.")
    dsub = data.add_subparsers(dest="source", metavar="SOURCE", required=True)
    bible = dsub.add_parser("bible", help="English (KJV) -> Spanish (RV 1909) Bible from Debian's SWORD modules")
    bible.add_argument("--english", choices=("kjv", "web"), default="kjv",
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
        p.add_argument("--dev-size", type=int, default=500, help="pairs held out for dev (default: 500)")
        p.add_argument("--test-size", type=int, default=500, help="pairs held out for test (default: 500)")
    for p in (bible, tsv, files):
        _add_tokenizer_args(p)
        p.set_defaults(func=cmd_data)

    demo = sub.add_parser("demo", help="the main job on the default data (what `make demo` runs)",
                          description="Build the Bible corpus, train the tokenizer and print the statistics.")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except AttnlabError as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
