"""Corpus readers: user files (TSV, two aligned files) with their errors, and the real Bible corpus."""

import bz2
import gzip
import json
import logging
import lzma
import multiprocessing
import os
import random
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from attnlab.data.bible import DEV_BOOKS, TEST_BOOKS, bible_corpus, sword_dir
from attnlab.data.corpus import (Pair, ReadCounts, check_input, file_corpus, holdout, iter_lines, iter_pairs, normalize,
                            read_pairs)
from attnlab.core.errors import AttnlabError

corpus_mod = sys.modules["attnlab.data.corpus"]  # `attnlab.data.corpus` is also the API's function of that name


def test_normalize():
    assert normalize("  ¶ And  God\tsaid,\n") == "And God said,"


def test_tsv_reads_pairs_and_skips_empty(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text("hello\thola\n\n  \nthe  house\tla casa\nonly\t \n", encoding="utf-8")
    pairs, skipped = read_pairs(f)
    assert pairs == [Pair("hello", "hola", "c.tsv:1"), Pair("the house", "la casa", "c.tsv:4")]
    assert skipped == 3


def test_tsv_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.tsv"
    f.write_text("a\tb\nno tab here\nc\td\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"bad\.tsv:2: expected 2 tab-separated fields .* found 1"):
        read_pairs(f)


def test_non_utf8_names_line(tmp_path):
    f = tmp_path / "latin1.tsv"
    f.write_bytes("a\tb\nse\u00f1or\tsir\n".encode("latin-1"))
    with pytest.raises(AttnlabError, match=r"latin1\.tsv:2: not valid UTF-8"):
        read_pairs(f)


def test_parallel_files_and_mismatch(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n\nfour\n", encoding="utf-8")
    (tmp_path / "a.es").write_text("uno\ndos\ntres\ncuatro\n", encoding="utf-8")
    pairs, skipped = read_pairs((tmp_path / "a.en", tmp_path / "a.es"))
    assert [(p.src, p.tgt) for p in pairs] == [("one", "uno"), ("two", "dos"), ("four", "cuatro")]
    assert skipped == 1
    (tmp_path / "b.es").write_text("uno\ndos\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"a\.en:3: line has no partner"):
        read_pairs((tmp_path / "a.en", tmp_path / "b.es"))


def test_empty_corpus_and_missing_file(tmp_path):
    f = tmp_path / "empty.tsv"
    f.write_text("\n\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match="no sentence pairs"):
        file_corpus(f)
    with pytest.raises(AttnlabError, match="no such file"):
        read_pairs(tmp_path / "nope.tsv")


def test_split_pairs_is_seeded_partition():
    pairs = [Pair(str(i), str(i), str(i)) for i in range(50)]
    a, b = holdout(pairs, 5, 7, seed=3), holdout(pairs, 5, 7, seed=3)
    assert a == b
    assert (len(a["train"]), len(a["dev"]), len(a["test"])) == (38, 5, 7)
    assert sorted(int(p.src) for s in a.values() for p in s) == list(range(50))
    with pytest.raises(AttnlabError, match="cannot hold out"):
        holdout(pairs, 30, 30)


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "attnlab.app.cli", *args], capture_output=True, text=True)


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
@pytest.mark.skipif(not _sword_ready() or not (sword_dir() / "mods.d" / "engWEB2015eb.conf").is_file(),
                    reason="SWORD module engWEB2015eb not installed (run ./scripts/system-deps.sh as root)")
def test_a_footnote_between_two_words_leaves_them_apart():
    """The WEB puts footnotes between words ("God<note>...</note> created"); with the note removed the words used
    to be glued ("Godcreated", 178 verses, 8 of them test verses)."""
    corpus = bible_corpus("web")
    by_ref = {p.ref: p.src for p in corpus.train + corpus.dev + corpus.test}
    assert by_ref["Gen 1:1"] == "In the beginning, God created the heavens and the earth."
    assert by_ref["Exod 20:1"] == "God spoke all these words, saying,"
    assert by_ref["Gen 4:1"].startswith("The man knew Eve his wife. She conceived, and gave birth")
    glued = ("Godcreated", "YahwehGod", "knewEve", "Godspoke")
    assert not [ref for ref, text in by_ref.items() if any(g in text for g in glued)]
    # the module stores its glossary (17,500 characters) after the end of Revelation, in the last verse's entry
    assert by_ref["Rev 22:21"] == "The grace of the Lord Jesus Christ be with all the saints. Amen."
    assert max(len(text) for text in by_ref.values()) < 1000 and not [t for t in by_ref.values() if "glossary" in t]


@pytest.mark.integration
@needs_sword
def test_sentencepiece_round_trip_on_the_bible():
    from attnlab.data.tokenizers import TokenizerConfig, build_tokenizers

    corpus = bible_corpus("kjv")
    toks = build_tokenizers(TokenizerConfig(kind="bpe", vocab_size=2000, joint=True),
                            [p.src for p in corpus.train], [p.tgt for p in corpus.train])
    for p in corpus.dev + corpus.test:
        assert toks.src.decode(toks.src.encode(p.src)) == p.src
        assert toks.tgt.decode(toks.tgt.encode(p.tgt)) == p.tgt


def test_processes_asking_for_the_bible_cache_at_once_build_it_once(tmp_path, monkeypatch):
    """The ranks of `attnlab train --procs N` ask for the cached Bible at the same moment: one builds it, the
    others wait and read it (written twice, its two modification times gave the ranks two store keys)."""
    module = sys.modules["attnlab.data.bible"]
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


# ---------------------------------------------------------------------------------------------- hostile files
def _tsv_with(tmp_path, name: str, line: bytes, at: int = 2, n: int = 5) -> tuple[Path, list[tuple[str, str]]]:
    """A TSV of n good pairs with `line` (raw bytes) inserted as line `at`."""
    good = [(f"word {k}", f"palabra {k}") for k in range(n)]
    rows = [f"{s}\t{t}\n".encode() for s, t in good]
    rows.insert(at - 1, line)
    path = tmp_path / name
    path.write_bytes(b"".join(rows))
    return path, good


def test_a_line_over_max_line_bytes_is_named_or_skipped_and_never_held_whole(tmp_path):
    path, good = _tsv_with(tmp_path, "long.tsv", b"the house " * 2_000_000 + b"\tla casa\n")  # a 20 MB line
    with pytest.raises(AttnlabError, match=r"long\.tsv:2: longer than data\.max_line_bytes = 65,536 bytes.*"
                                           r"skip_bad_lines"):
        read_pairs(path)
    counts = ReadCounts()
    tracemalloc.start()
    try:
        pairs = list(iter_pairs(path, counts, skip_bad_lines=True))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(s, t) for _, s, t in pairs] == good and counts.bad == 1
    assert peak < 4 << 20, f"reading a 20 MB line held {peak / 1e6:.1f} MB"


def test_max_line_bytes_counts_the_line_without_its_end(tmp_path):
    path = tmp_path / "edge.tsv"
    path.write_bytes(b"ab\tcd\r\n" + b"abc\tdef\n" + b"ab\tcd")  # 6 bytes with CR, 7, 5 (no line end at the end)
    assert [line for _, line in iter_lines(path, max_line_bytes=7)] == ["ab\tcd", "abc\tdef", "ab\tcd"]
    with pytest.raises(AttnlabError, match=r"edge\.tsv:2: longer than data\.max_line_bytes = 6 bytes"):
        list(iter_lines(path, max_line_bytes=6))
    assert len(list(iter_lines(path, max_line_bytes=0))) == 3  # 0: no limit


def _reference_lines(data: bytes, max_line_bytes: int) -> list[tuple[int, str | None]]:
    """What iter_lines must give, read the obvious way: the whole file split at LF; None for a bad line."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    rows = data.split(b"\n")
    if rows[-1] == b"":
        rows.pop()
    out = []
    for i, row in enumerate(rows, start=1):
        try:
            ok = not max_line_bytes or len(row) <= max_line_bytes
            out.append((i, row.decode("utf-8").rstrip("\r") if ok else None))
        except UnicodeDecodeError:
            out.append((i, None))
    return out


@pytest.mark.parametrize("block", [1, 2, 3, 5, 16, 64, 1 << 20])
def test_lines_read_in_blocks_equal_the_whole_file_split(tmp_path, monkeypatch, block):
    monkeypatch.setattr(corpus_mod, "_BLOCK", block)
    rng = random.Random(block)
    pieces = [b"", b"a", b"hola mundo", "se\u00f1or \u00e9t\u00e9 \U0001f600".encode(), b"\xff\xfe", b"x\r", b"\r",
              b"y" * 40, "\u00f1".encode() * 15]
    for case in range(40):
        rows = [b"".join(rng.choices(pieces, k=rng.randint(0, 4))) for _ in range(rng.randint(0, 12))]
        data = (b"\xef\xbb\xbf" if case % 5 == 0 else b"") + b"\n".join(rows) + (b"\n" if case % 3 else b"")
        path = tmp_path / f"case{case}.txt"
        path.write_bytes(data)
        for limit in (0, 12, 41):
            expected = _reference_lines(data, limit)
            got = list(corpus_mod._lines(path, limit, skip_bad_lines=True))
            assert got == expected, (data, limit)
            bad = [i for i, line in expected if line is None]
            if bad:
                with pytest.raises(AttnlabError, match=rf"case{case}\.txt:{bad[0]}: "):
                    list(iter_lines(path, max_line_bytes=limit))
            else:
                assert list(iter_lines(path, max_line_bytes=limit)) == expected


def test_invalid_utf8_is_skipped_and_counted_with_skip_bad_lines(tmp_path):
    path, good = _tsv_with(tmp_path, "latin1.tsv", "se\u00f1or\tsir\n".encode("latin-1"), at=3)
    with pytest.raises(AttnlabError, match=r"latin1\.tsv:3: not valid UTF-8 \(byte 0xf1\).*skip_bad_lines"):
        read_pairs(path)
    counts = ReadCounts()
    assert [(s, t) for _, s, t in iter_pairs(path, counts, skip_bad_lines=True)] == good and counts.bad == 1
    # two aligned files: a bad line in either drops the pair, and the files stay aligned
    src, tgt = tmp_path / "a.en", tmp_path / "a.es"
    src.write_bytes(b"one\ntwo\nthree\nfour\n")
    tgt.write_bytes(b"uno\n\xffdos\ntres\ncuatro\n")
    counts = ReadCounts()
    assert [(i, s, t) for i, s, t in iter_pairs((src, tgt), counts, skip_bad_lines=True)] == \
        [(1, "one", "uno"), (3, "three", "tres"), (4, "four", "cuatro")] and counts.bad == 1
    with pytest.raises(AttnlabError, match=r"a\.es:2: not valid UTF-8 \(byte 0xff\)"):
        read_pairs((src, tgt))


@pytest.mark.parametrize("line, message", [
    ('{"src": "a \\ud800 b", "tgt": "la"}', r"a lone surrogate escape"),
    ('{"src": "a", "tgt": "la \\udfff"}', r"a lone surrogate escape"),
    ("[" * 30_000 + "]" * 30_000, r"JSON nested too deeply"),  # 60 KB: under max_line_bytes
    ('{"src": "a", "tgt": "b", "x": ' + "[" * 30_000 + "]" * 30_000 + "}", r"JSON nested too deeply"),
])
def test_json_lines_with_a_lone_surrogate_or_deep_nesting_are_malformed_lines(tmp_path, line, message):
    good = [(f"word {k}", f"palabra {k}") for k in range(5)]
    rows = [json.dumps({"src": s, "tgt": t}) for s, t in good]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([rows[0], line, *rows[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=rf"hostile\.jsonl:2: {message}") as e:
        read_pairs(path)
    assert "\n" not in str(e.value)
    counts = ReadCounts()
    assert [(s, t) for _, s, t in iter_pairs(path, counts, skip_bad_lines=True)] == good and counts.bad == 1


def test_a_paired_surrogate_escape_is_one_character(tmp_path):
    path = tmp_path / "emoji.jsonl"
    path.write_text('{"src": "smile \\ud83d\\ude00", "tgt": "sonrisa"}\n', encoding="utf-8")
    assert [(p.src, p.tgt) for p in read_pairs(path)[0]] == [("smile \U0001f600", "sonrisa")]


def _fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.tsv"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda d: d, r"is a directory, not a corpus file"),
    (_fifo, r"is not a regular file \(a FIFO\)"),
    (lambda d: Path("/dev/zero"), r"is not a regular file \(a character device\)"),
    (lambda d: Path("/dev/null"), r"is not a regular file \(a character device\)"),
    (lambda d: d / "missing.tsv", r"no such file"),
])
def test_an_input_that_is_not_a_regular_file_is_named_as_such(tmp_path, make, message):
    path = make(tmp_path)
    for read in (check_input, read_pairs, lambda p: list(iter_lines(p))):
        with pytest.raises(AttnlabError, match=rf"^{re.escape(str(path))}: {message}"):
            read(path)


def _bomb(path: Path, newlines: int) -> Path:
    with COMPRESSORS[path.suffix](path, "wb") as f:
        f.write(b"the cat\tla gata\n")
        for _ in range(newlines >> 16):
            f.write(b"\n" * (1 << 16))
    return path


COMPRESSORS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}


@pytest.fixture
def small_limits(monkeypatch):
    """The expansion judged after 256 KiB and read in blocks of 64 KiB (not 16 MiB and 1 MiB): tiny bombs do."""
    monkeypatch.setattr(corpus_mod, "_EXPANSION_FLOOR", 1 << 18)
    monkeypatch.setattr(corpus_mod, "_BLOCK", 1 << 16)


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
def test_a_decompression_bomb_is_refused_in_one_line(tmp_path, small_limits, suffix):
    path = _bomb(tmp_path / f"bomb.tsv{suffix}", 1 << 20)  # 1 MiB of newlines in a few KB
    t0 = time.perf_counter()
    with pytest.raises(AttnlabError, match=rf"bomb\.tsv\{suffix}: expands more than 100 times its size .*"
                                           r"data\.max_expansion = 0 reads it anyway") as e:
        read_pairs(path)
    assert "\n" not in str(e.value) and time.perf_counter() - t0 < 5
    counts = ReadCounts()
    assert len(list(iter_pairs(path, counts, max_expansion=0))) == 1 and counts.empty == 1 << 20


def test_reading_a_large_file_logs_its_progress(tmp_path, small_limits, monkeypatch, caplog):
    monkeypatch.setattr(corpus_mod, "_LOG_EVERY", 0.0)  # stderr is no terminal under pytest: log lines, not a bar
    path = _bomb(tmp_path / "big.tsv.gz", 1 << 20)
    with caplog.at_level(logging.INFO, logger="attnlab"):
        assert len(list(iter_pairs(path, max_expansion=0))) == 1
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"reading {path}: ")]
    assert len(progress) >= 10 and "MB expanded" in progress[-1] and "lines" in progress[-1]


def test_a_well_compressed_corpus_reads_under_the_default_limit(tmp_path):
    rows = "".join(f"{s}\t{t}\n" for s, t in [("the house is big", "la casa es grande")] * 20_000)
    path = tmp_path / "repetitive.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(rows)  # ~700 KB that gzip shrinks ~300 times: under the 16 MiB floor, so never judged
    assert len(read_pairs(path)[0]) == 20_000
