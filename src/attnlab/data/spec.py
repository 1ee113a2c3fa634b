"""What a prepared store is made from and the key it is found by: `StoreSpec` (the corpus, how it is read and
split, the filters, the tokenizer settings), its input files and their fingerprints, and `store_key`, the hash of
all of it with the tokenizers' digest. `attnlab.data.prepare` builds a store for a spec; a second run with the same
key reuses it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


from attnlab.core.errors import AttnlabError
from attnlab.data.bible import bible_tsv, renderings
from attnlab.data.corpus import MAX_EXPANSION, MAX_LINE_BYTES, check_input, spec_name
from attnlab.data.store import STORE_VERSION
from attnlab.data.tokenizers import Tokenizer, TokenizerConfig, TokenizerPair

@dataclass
class StoreSpec:
    """What a store is built from: the corpus (the Bible, or a user's files), how it is read and split, the
    training filters and the tokenizer settings. Dev and test are never filtered.

    corpus "bible": the verse-aligned English -> Spanish Bible, split by book; `english` lists the English
    renderings (`attnlab.data.bible.renderings`): each training verse is one pair per rendering (same target), dev and
    test are the first rendering's (the others' are read from the corpus when asked for). corpus "files": each
    of train/dev/test one TSV or JSON-lines file or two aligned files (plain, .gz, .xz or .bz2); without dev and
    test files, dev_size and test_size pairs are held out of train at random (seed `holdout_seed`); with one of
    them given, the other's size is held out (`held_sizes`; a size 0 leaves that split empty).
    Filters (training pairs): max_words on both sides (0: off), max_ratio of the longer to the shorter side in
    words (0: off), dedup (drop exact repeats of a pair), then a random subset of max_train_pairs (0: all).
    Reading (`attnlab.data.corpus.iter_lines`): a line longer than max_line_bytes or not UTF-8 stops the prepare with
    its file:line, or with skip_bad_lines is skipped and counted, like a malformed line; a compressed file
    expanding more than max_expansion times its size is refused (0: no limit).
    monolingual (a language model's text): "" for pairs; "src" or "tgt" keeps one side of the Bible's pairs,
    "lines" reads each file line as one sentence. Each sentence is stored as its target side, with an empty source,
    and one tokenizer is trained on the sentences (the pair's src and tgt are that tokenizer; dev and test pairs
    carry the sentence on both sides).
    """

    corpus: str = "bible"
    english: list[str] = field(default_factory=lambda: ["kjv"])
    train: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    dev_size: int = 500
    test_size: int = 500
    holdout_seed: int = 0
    max_words: int = 0
    max_ratio: float = 0.0
    dedup: bool = False
    max_train_pairs: int = 0
    subset_seed: int = 0
    skip_bad_lines: bool = False
    max_line_bytes: int = MAX_LINE_BYTES
    max_expansion: float = MAX_EXPANSION
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    monolingual: str = ""

    MONOLINGUAL = ("", "src", "tgt", "lines")

    def __post_init__(self) -> None:
        if self.monolingual not in self.MONOLINGUAL:
            raise AttnlabError(f"monolingual {self.monolingual!r} is not one of {self.MONOLINGUAL}")
        if self.monolingual == "lines" and self.corpus == "bible" or \
                self.monolingual in ("src", "tgt") and self.corpus != "bible":
            raise AttnlabError(f"monolingual {self.monolingual!r} does not apply to corpus {self.corpus!r}")

    @property
    def name(self) -> str:
        if self.corpus == "bible":
            return f"bible-{'+'.join(self.english)}-es"
        return Path(spec_name(file_spec(self.train))).name.split(".")[0] or "corpus"


def file_spec(paths: list[str]) -> str | tuple[str, str] | None:
    if not paths:
        return None
    if len(paths) == 1:
        return paths[0]
    if len(paths) == 2:
        return (paths[0], paths[1])
    raise AttnlabError(f"a corpus split is one TSV or JSON-lines path or two aligned file paths, got {list(paths)}")


def held_sizes(spec: StoreSpec) -> tuple[int, int]:
    """The (dev, test) pairs a files corpus holds out of train at random: dev_size for a dev not given as a file,
    test_size for a test not given as one (0 for a split given)."""
    return (0 if spec.dev else spec.dev_size), (0 if spec.test else spec.test_size)


def input_files(spec: StoreSpec) -> list[Path]:
    """The files a store of `spec` is read from (the Bible: its cached TSV, built from SWORD on first use)."""
    if spec.corpus == "bible":
        return [bible_tsv(english) for english in renderings(spec.english)]
    if not spec.train:
        raise AttnlabError("data.train: give a TSV or JSON-lines path or two aligned file paths for corpus = 'files'")
    files = [Path(p) for paths in (spec.train, spec.dev, spec.test) for p in paths]
    for paths in (spec.train, spec.dev, spec.test):
        file_spec(paths)
    for f in files:
        check_input(f)
    return files


def fingerprint(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def tokenizer_digest(tokenizers: TokenizerPair) -> str:
    """SHA-256 of a tokenizer pair's model files: equal digests, equal token ids."""
    h = hashlib.sha256(b"joint" if tokenizers.joint else b"separate")
    for tok in (tokenizers.src, tokenizers.tgt):
        h.update(tok.kind.encode() + b"\0" + hashlib.sha256(tok.to_bytes()).digest())
    return h.hexdigest()


def spec_dict(spec: StoreSpec) -> dict:
    """The spec as the manifest and the key record it; one English rendering as its name, max_line_bytes and
    monolingual only when not their defaults (the keys of stores prepared before `english` became a list, before
    max_line_bytes and before monolingual stores), never max_expansion (it decides whether a file is read, not what
    is read from it)."""
    d = asdict(spec)
    if len(spec.english) == 1:
        d["english"] = spec.english[0]
    if spec.max_line_bytes == MAX_LINE_BYTES:
        del d["max_line_bytes"]
    if not spec.monolingual:
        del d["monolingual"]
    del d["max_expansion"]
    return d


def store_key(spec: StoreSpec, fixed: TokenizerPair | None = None, fixed_tgt: Tokenizer | None = None) -> str:
    """The hash of everything a store's content depends on: the inputs' fingerprints (path, size, mtime), the
    spec (reading, splitting, filters, tokenizer settings and sample) and, when the tokenizers are given rather than
    trained, their digest."""
    inputs = [fingerprint(f) for f in input_files(spec)]
    given = tokenizer_digest(fixed) if fixed is not None else None
    given_tgt = hashlib.sha256(fixed_tgt.to_bytes()).hexdigest() if fixed_tgt is not None else None
    key = {"version": STORE_VERSION, "spec": spec_dict(spec), "inputs": inputs, "tokenizers": given,
           "tgt_tokenizer": given_tgt}
    if spec.corpus == "files" and bool(spec.dev) != bool(spec.test):  # one split given: the other held out since
        key["held_out"] = held_sizes(spec)                            # 2026-11-30 (it was left empty before)
    blob = json.dumps(key, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
