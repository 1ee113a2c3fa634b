"""Corpus readers: user files (TSV, two aligned files) with their errors, and the real Bible corpus."""

import multiprocessing
import subprocess
import sys
import time

import pytest

from attnlab.corpus import (DEV_BOOKS, TEST_BOOKS, Pair, sword_dir, bible_corpus, file_corpus, normalize,
                            read_parallel, read_tsv, holdout)
from attnlab.errors import AttnlabError


def test_normalize():
    assert normalize("  ¶ And  God\tsaid,\n") == "And God said,"


def test_tsv_reads_pairs_and_skips_empty(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text("hello\thola\n\n  \nthe  house\tla casa\nonly\t \n", encoding="utf-8")
    pairs, skipped = read_tsv(f)
    assert pairs == [Pair("hello", "hola", "c.tsv:1"), Pair("the house", "la casa", "c.tsv:4")]
    assert skipped == 3


def test_tsv_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.tsv"
    f.write_text("a\tb\nno tab here\nc\td\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"bad\.tsv:2: expected 2 tab-separated fields .* found 1"):
        read_tsv(f)


def test_non_utf8_names_line(tmp_path):
    f = tmp_path / "latin1.tsv"
    f.write_bytes("a\tb\nse\u00f1or\tsir\n".encode("latin-1"))
    with pytest.raises(AttnlabError, match=r"latin1\.tsv:2: not valid UTF-8"):
        read_tsv(f)


def test_parallel_files_and_mismatch(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n\nfour\n", encoding="utf-8")
    (tmp_path / "a.es").write_text("uno\ndos\ntres\ncuatro\n", encoding="utf-8")
    pairs, skipped = read_parallel(tmp_path / "a.en", tmp_path / "a.es")
    assert [(p.src, p.tgt) for p in pairs] == [("one", "uno"), ("two", "dos"), ("four", "cuatro")]
    assert skipped == 1
    (tmp_path / "b.es").write_text("uno\ndos\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"a\.en:3: line has no partner"):
        read_parallel(tmp_path / "a.en", tmp_path / "b.es")


def test_empty_corpus_and_missing_file(tmp_path):
    f = tmp_path / "empty.tsv"
    f.write_text("\n\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match="no sentence pairs"):
        file_corpus(f)
    with pytest.raises(AttnlabError, match="no such file"):
        read_tsv(tmp_path / "nope.tsv")


def test_split_pairs_is_seeded_partition():
    pairs = [Pair(str(i), str(i), str(i)) for i in range(50)]
    a, b = holdout(pairs, 5, 7, seed=3), holdout(pairs, 5, 7, seed=3)
    assert a == b
    assert (len(a["train"]), len(a["dev"]), len(a["test"])) == (38, 5, 7)
    assert sorted(int(p.src) for s in a.values() for p in s) == list(range(50))
    with pytest.raises(AttnlabError, match="cannot hold out"):
        holdout(pairs, 30, 30)


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "attnlab.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("content, argv_tail, message", [
    ("a\tb\nbroken\n", [], "bad.tsv:2"),
    ("", [], "no sentence pairs"),
    (b"caf\xe9\tcafe\n", [], "not valid UTF-8"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, content, argv_tail, message):
    f = tmp_path / "bad.tsv"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    done = _run_cli("data", "tsv", str(f), "--tokenizer", "none", *argv_tail)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_mismatched_files_exit_2(tmp_path):
    (tmp_path / "x.en").write_text("a\nb\nc\n")
    (tmp_path / "x.es").write_text("a\n")
    done = _run_cli("data", "files", str(tmp_path / "x.en"), str(tmp_path / "x.es"), "--tokenizer", "none")
    assert done.returncode == 2 and "x.en:2: line has no partner" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_help_lists_commands():
    done = _run_cli("--help")
    assert done.returncode == 0
    for command in ("data", "demo"):
        assert command in done.stdout


def _sword_ready() -> bool:
    d = sword_dir()
    return d is not None and all((d / "mods.d" / f"{m}.conf").is_file() for m in ("engKJV2006eb", "spaRV1909eb"))


needs_sword = pytest.mark.skipif(not _sword_ready(), reason="SWORD modules engKJV2006eb/spaRV1909eb not installed "
                                 "(run ./scripts/system-deps.sh as root)")


@pytest.mark.integration
@needs_sword
def test_bible_corpus_counts_and_split(tmp_path, monkeypatch):
    corpus = bible_corpus("kjv")
    assert (len(corpus.train), len(corpus.dev), len(corpus.test)) == (29_944, 222, 918)
    assert corpus.skipped == 18
    assert corpus.train[0] == Pair("In the beginning God created the heaven and the earth.",
                                   "EN el principio crió Dios los cielos y la tierra.", "Gen 1:1")
    assert {p.ref.rsplit(" ", 1)[0] for p in corpus.dev} == set(DEV_BOOKS)
    assert {p.ref.rsplit(" ", 1)[0] for p in corpus.test} == set(TEST_BOOKS)
    assert not any(p.ref.rsplit(" ", 1)[0] in DEV_BOOKS + TEST_BOOKS for p in corpus.train)
    assert all(p.src and p.tgt and "¶" not in p.src for p in corpus.train)
    # the cache holds the same corpus
    again = bible_corpus("kjv")
    assert again.test == corpus.test and again.train[-1] == corpus.train[-1]


@pytest.mark.integration
@needs_sword
def test_sentencepiece_round_trip_on_the_bible():
    from attnlab.tokenizers import TokenizerConfig, build_tokenizers

    corpus = bible_corpus("kjv")
    toks = build_tokenizers(TokenizerConfig(kind="bpe", vocab_size=2000, joint=True),
                            [p.src for p in corpus.train], [p.tgt for p in corpus.train])
    for p in corpus.dev + corpus.test:
        assert toks.src.decode(toks.src.encode(p.src)) == p.src
        assert toks.tgt.decode(toks.tgt.encode(p.tgt)) == p.tgt


def test_processes_asking_for_the_bible_cache_at_once_build_it_once(tmp_path, monkeypatch):
    """The ranks of `attnlab train --procs N` ask for the cached Bible at the same moment: one builds it, the
    others wait and read it (written twice, its two modification times gave the ranks two store keys)."""
    module = sys.modules["attnlab.corpus"]  # not attnlab.corpus: the package's `corpus` attribute is a function
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    builds = tmp_path / "builds"

    def slow_build(english):
        with open(builds, "a") as f:
            f.write(english + "\n")
        time.sleep(0.5)
        return {"train": [Pair("In the beginning", "En el principio", "Gen 1:1")], "dev": [], "test": []}, 0

    monkeypatch.setattr(module, "build_bible_pairs", slow_build)
    procs = [multiprocessing.get_context("fork").Process(target=module.bible_tsv, args=("web",)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert builds.read_text() == "web\n"
    assert module.bible_tsv("web").read_text(encoding="utf-8").splitlines()[1] == \
        "train\tGen 1:1\tIn the beginning\tEn el principio"
