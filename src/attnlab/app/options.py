"""The options of the `attnlab` command line that several commands share, each declared once
(`attnlab.app.parser` builds every command from them): the argument types (numbers within limits, image formats),
the parent parsers (`option_groups`: device, checkpoint, `--set`, a run directory, translation precision, ...)
and one helper per option whose help or default differs by command (`beam_option`, `split_option`,
`formats_option`, `engine_option`, ...). The numeric options' limits are config.py's (a config key's) or the API's
(MAX_SUMMARY_LEN, MAX_CHARS, ...), which checks the same arguments from Python.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.app.api import CHECKPOINTS, MAX_PROCS, SPLITS, TOKENIZERS, DecodeConfig
from attnlab.core.config import MAX_BEAM, MAX_COUNT, MAX_VOCAB
from attnlab.core.devices import DEVICES
from attnlab.core.plotting import supported_formats

ENGINES = ("torch", "ctranslate2")  # --engine: attnlab's own search, or a CTranslate2 export of the run
Options = dict[str, argparse.ArgumentParser]  # the parent parsers of `option_groups`, by name


# ---------------------------------------------------------------------------------------------- argument types
def number(kind: type, lo: float, hi: float):
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


def int_in(lo: int, hi: int):
    return number(int, lo, hi)


def float_in(lo: float, hi: float):
    return number(float, lo, hi)


def format_list(text: str) -> list[str]:
    """An argparse type: comma-separated image formats matplotlib writes (png,svg)."""
    formats = [f.strip().lower() for f in text.split(",")]
    supported = supported_formats()
    for f in formats:
        if f not in supported:
            raise argparse.ArgumentTypeError(f"{f!r} is not a format matplotlib writes; choose from "
                                             f"{', '.join(supported)}")
    return formats


# ---------------------------------------------------------------------------------------------- shared options
# Each option that several commands share is declared once: the ones that read the same everywhere in a parent
# parser, the ones whose default or help differs by command in a helper that takes them.
def option_groups() -> Options:
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
    checkpoint.add_argument("--checkpoint", choices=CHECKPOINTS, default="best",
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
    train.add_argument("--procs", type=int_in(1, MAX_PROCS), default=1, metavar="N",
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
    amp.add_argument("--batch-size", type=int_in(*DecodeConfig.LIMITS["batch_size"]), default=None, metavar="N",
                     help="translation: sentences per search batch (default: the run's decode.batch_size; 0 or "
                          "unset: by device, 64 on a CPU, 1024 on a GPU)")
    evaluate = argparse.ArgumentParser(add_help=False, parents=[run])
    split_option(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print the result as JSON")
    return {"device": device, "device_cpu": device_cpu, "checkpoint": checkpoint, "overrides": overrides,
            "train": train, "run": run, "run_cpu": run_cpu, "evaluate": evaluate, "amp": amp}


def beam_option(p: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    """--beam, the beam size of a command that translates (help and default its own)."""
    p.add_argument("--beam", type=int_in(1, MAX_BEAM), default=default, help=help)


def split_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--split, the split a command reads (default test)."""
    p.add_argument("--split", choices=SPLITS, default="test", help=help)


def formats_option(p: argparse.ArgumentParser, default: str) -> None:
    """--formats, the image formats of a plot."""
    p.add_argument("--formats", type=format_list, default=default, help=f"comma-separated formats (default {default})")


def engine_option(p: argparse.ArgumentParser, help: str) -> None:
    """--engine, the search that decodes: attnlab's own (default) or a CTranslate2 export."""
    p.add_argument("--engine", choices=ENGINES, default="torch", help=help)


def tokenizer_options(p: argparse.ArgumentParser) -> None:
    """The tokenizer options of the corpus statistics (data bible, tsv, files)."""
    p.add_argument("--tokenizer", choices=TOKENIZERS, default="unigram",
                   help="tokenizer to train on the train split for the token statistics (default: unigram)")
    p.add_argument("--vocab-size", type=int_in(1, MAX_VOCAB), default=8000,
                   help="subword vocabulary size (default: 8000)")
    p.add_argument("--separate-vocab", action="store_true",
                   help="separate source and target vocabularies (default: one joint vocabulary)")
    p.add_argument("--save-tokenizer", type=Path, metavar="DIR", help="save the trained tokenizer to DIR")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")


def held_out_options(p: argparse.ArgumentParser) -> None:
    """The dev and test sizes held out of a corpus file (data tsv, files)."""
    p.add_argument("--dev-size", type=int_in(0, MAX_COUNT), default=500, help="pairs held out for dev (default: 500)")
    p.add_argument("--test-size", type=int_in(0, MAX_COUNT), default=500,
                   help="pairs held out for test (default: 500)")
