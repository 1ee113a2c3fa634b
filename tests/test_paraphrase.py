"""The paraphrase pairs (attnlab.data.paraphrase): labels, kinds, balance, determinism, split by book."""

from collections import Counter

import pytest

from attnlab.data.bible import DEV_BOOKS, TEST_BOOKS, sword_dir
from attnlab.core.errors import AttnlabError
from attnlab.data.paraphrase import KINDS, Verse, make_pairs


def synthetic_verses(chapters: int = 6, per_chapter: int = 5, repeat: bool = False) -> list[Verse]:
    verses = [Verse(f"Book {c}:{v}", f"kjv {c} {v}", f"web {c} {v}")
              for c in range(1, chapters + 1) for v in range(1, per_chapter + 1)]
    if repeat:  # a refrain: verse 2 of every chapter has the same text
        verses = [Verse(x.ref, "refrain", "refrain web") if x.ref.endswith(":2") else x for x in verses]
    return verses


def check_invariants(verses: list[Verse], pairs) -> None:
    by_ref = {v.ref: v for v in verses}
    assert len(pairs) == 2 * len(verses)
    assert sum(p.label for p in pairs) == len(verses)  # balanced
    for p in pairs:
        assert p.kind in KINDS
        a, b = by_ref[p.ref_a], by_ref[p.ref_b]
        assert (p.a, p.b) == (a.kjv, b.web)
        assert p.label == (p.kind == "same") == (p.ref_a == p.ref_b)
        if p.kind == "chapter":
            assert a.chapter == b.chapter
        if p.kind == "random":
            assert a.chapter != b.chapter
        if p.label == 0:
            assert p.b != a.web and p.a != b.kjv  # never a negative with the verse's own text


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_pairs_are_labelled_balanced_and_half_hard(seed):
    verses = synthetic_verses()
    pairs = make_pairs(verses, seed)
    check_invariants(verses, pairs)
    kinds = Counter(p.kind for p in pairs)
    assert kinds == {"same": 30, "chapter": 15, "random": 15}
    # one positive and one negative per verse, in verse order
    assert [p.ref_a for p in pairs] == [v.ref for v in verses for _ in range(2)]


def test_pairs_are_deterministic_by_seed():
    verses = synthetic_verses()
    assert make_pairs(verses, 3) == make_pairs(verses, 3)
    assert make_pairs(verses, 3) != make_pairs(verses, 4)


def test_repeated_texts_are_never_negatives_and_single_verse_chapters_fall_back_to_random():
    verses = synthetic_verses(repeat=True) + [Verse("Solo 1:1", "alone", "alone web")]
    pairs = make_pairs(verses, 0)
    check_invariants(verses, pairs)
    solo = [p for p in pairs if p.ref_a == "Solo 1:1" and p.label == 0]
    assert solo[0].kind == "random"
    # no pair pairs one refrain verse with another's (equal) text
    assert not any(p.label == 0 and p.ref_a.endswith(":2") and p.ref_b.endswith(":2") for p in pairs)


def test_overlap_hard_negatives_share_the_most_words_and_leave_the_other_pairs_alone():
    from attnlab.data.paraphrase import word_overlap

    verses = [Verse(f"Book {c}:{v}", f"kjv {c} {v} w{v}", f"web {c} {v} w{v} w{(v % 5) + 1}")
              for c in (1, 2, 3) for v in range(1, 6)]
    rand, over = make_pairs(verses, 5), make_pairs(verses, 5, hard_negatives="overlap")
    check_invariants(verses, over)
    assert [p for p in rand if p.kind != "chapter"] == [p for p in over if p.kind != "chapter"]
    by_ref = {v.ref: v for v in verses}
    hard = [p for p in over if p.kind == "chapter"]
    assert len(hard) == 8
    for p in hard:  # WEB of verse v contains w{v+1}: the previous verse (cyclically) of the chapter shares most
        a = by_ref[p.ref_a]
        others = [v for v in verses if v.chapter == a.chapter and v.ref != a.ref]
        assert word_overlap(p.a, p.b) == max(word_overlap(a.kjv, v.web) for v in others)
        assert int(p.ref_b.rsplit(":")[1]) % 5 + 1 == int(p.ref_a.rsplit(":")[1])
    with pytest.raises(AttnlabError, match="hard_negatives 'x' is not one of random, overlap"):
        make_pairs(verses, 0, hard_negatives="x")


def test_word_overlap_is_jaccard_of_lowercased_word_sets():
    from attnlab.data.paraphrase import word_overlap

    assert word_overlap("And God said, Let", "God said: let there") == pytest.approx(3 / 5)
    assert word_overlap("a", "b") == 0.0


def test_one_chapter_is_an_error():
    with pytest.raises(AttnlabError, match="at least 2 chapters"):
        make_pairs(synthetic_verses(chapters=1), 0)


def _sword_ready() -> bool:
    d = sword_dir()
    return d is not None and all((d / "mods.d" / f"{m}.conf").is_file() for m in ("engKJV2006eb", "engWEB2015eb"))


@pytest.mark.integration
@pytest.mark.skipif(not _sword_ready(), reason="SWORD modules engKJV2006eb/engWEB2015eb not installed "
                    "(run ./scripts/system-deps.sh as root)")
def test_bible_paraphrase_corpus():
    from attnlab.data.paraphrase import cached_verses, paraphrase_corpus

    corpus = paraphrase_corpus(0)
    assert (len(corpus.train), len(corpus.dev), len(corpus.test)) == (59_908, 446, 1_836)
    assert corpus.dropped == 7
    splits, _ = cached_verses()
    for name, books in (("dev", set(DEV_BOOKS)), ("test", set(TEST_BOOKS))):
        pairs = corpus.split(name)
        assert {p.ref_a.split(" ")[0] for p in pairs} == {p.ref_b.split(" ")[0] for p in pairs} == books
        check_invariants(splits[name], pairs)
        kinds = Counter(p.kind for p in pairs)
        assert kinds["same"] == len(pairs) // 2 and abs(kinds["chapter"] - kinds["random"]) <= 1
    train_books = {p.ref_b.split(" ")[0] for p in corpus.train} | {p.ref_a.split(" ")[0] for p in corpus.train}
    assert not train_books & (set(DEV_BOOKS) | set(TEST_BOOKS)) and len(train_books) == 66 - 7
    assert sum(p.label for p in corpus.train) == len(corpus.train) // 2
    gen = corpus.train[0]
    assert (gen.a, gen.b) == ("In the beginning God created the heaven and the earth.",
                              "In the beginning, God created the heavens and the earth.")  # no note-glued words
    assert paraphrase_corpus(0).test == corpus.test  # deterministic (and from the cache)
    assert paraphrase_corpus(1).test != corpus.test


# ---------------------------------------------------------------------------------------------- experiment
def test_accuracy_by_kind_counts_each_kind():
    import torch

    from attnlab.families.pairs import accuracy_by_kind
    from attnlab.data.paraphrase import ParaphrasePair

    kinds = ["same", "chapter", "same", "random", "same", "chapter"]
    pairs = [ParaphrasePair("a", "b", int(k == "same"), "", "", k) for k in kinds]
    preds = torch.tensor([1, 1, 0, 0, 1, 0])  # right: 1st, 4th, 5th, 6th
    r = accuracy_by_kind(pairs, preds)
    assert r["accuracy"] == pytest.approx(4 / 6) and r["pairs"] == 6
    assert (r["accuracy_same"], r["accuracy_chapter"], r["accuracy_random"]) == (pytest.approx(2 / 3), 0.5, 1.0)
    assert (r["pairs_same"], r["pairs_chapter"], r["pairs_random"]) == (3, 2, 1)


def test_paraphrase_config_rejects_unknown_keys_and_families(tmp_path):
    from attnlab.families.pairs import load_paraphrase_config, make_pair_tokenizers

    cfg = load_paraphrase_config("configs/paraphrase-decomposable.toml")
    assert cfg.model.family == "decomposable" and cfg.train.label_smoothing == 0.0
    with pytest.raises(AttnlabError, match="model.decomposable.hiden_dim"):
        load_paraphrase_config("configs/paraphrase-decomposable.toml", ["model.decomposable.hiden_dim=3"])
    with pytest.raises(AttnlabError, match="model.family: 'bert' is not one of 'decomposable', 'minilm'"):
        load_paraphrase_config(None, ["model.family=bert"])
    with pytest.raises(AttnlabError, match="tokenizer.joint"):
        make_pair_tokenizers(load_paraphrase_config(None, ["tokenizer.joint=false"]), None)


@pytest.mark.integration
@pytest.mark.skipif(not _sword_ready(), reason="SWORD modules engKJV2006eb/engWEB2015eb not installed")
def test_paraphrase_train_evaluate_resume_plot(tmp_path, capsys):
    import json

    from attnlab.app.cli import main

    run = tmp_path / "run"
    small = ["data.max_train_pairs=300", "tokenizer.vocab_size=500", "model.decomposable.emb_dim=8",
             "model.decomposable.hidden_dim=8", "model.decomposable.intra_attention=true", "train.max_steps=4",
             "train.eval_every=4", "train.max_tokens=600", "train.progress=false", "train.max_minutes=0"]
    args = ["paraphrase", "train", "configs/paraphrase-decomposable.toml", "--out", str(run)]
    assert main(args + [x for s in small for x in ("--set", s)]) == 0
    assert main(args) == 2  # the run exists: refused
    assert main(["paraphrase", "train", str(run), "--resume", "--set", "train.max_steps=6"]) == 0
    assert main(["paraphrase", "train", str(run), "--resume", "--set", "train.lr=1"]) == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    dev = [r for r in records if "accuracy" in r]
    assert [r["step"] for r in dev] == [4, 6]
    capsys.readouterr()
    assert main(["paraphrase", "evaluate", str(run), "--split", "dev", "--checkpoint", "last", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pairs"] == 446 and result["accuracy"] == pytest.approx(dev[-1]["accuracy"])
    assert result["pairs_same"] == 223 and (run / "eval" / "paraphrase_dev.errors.tsv").is_file()
    assert main(["paraphrase", "plot", str(run), "--a", "Jesus wept.", "--b", "Jesus cried.", "--formats", "png"]) == 0
    assert (run / "plots" / "alignment.png").stat().st_size > 0 and (run / "plots" / "alignment_b.png").is_file()
    assert main(["paraphrase", "plot", str(run), "--a", " ", "--b", "Jesus cried."]) == 2


@pytest.mark.parametrize("intra", [False, True])
def test_summary_of_a_paraphrase_config_counts_the_papers_layers(intra, capsys):
    from attnlab.app.cli import main

    assert main(["summary", "configs/paraphrase-decomposable.toml", "--set",
                 f"model.decomposable.intra_attention={str(intra).lower()}"]) == 0
    out = capsys.readouterr().out
    V, E, D, K = 8000, 200, 200, 10
    rep = 2 * D if intra else D
    two_layers = lambda i: (i * D + D) + (D * D + D)  # noqa: E731  (a feed-forward net of sec. 4.1)
    expected = V * E + E * D + two_layers(rep) + two_layers(2 * rep) + two_layers(2 * D) + (D * 2 + 2)
    if intra:
        expected += two_layers(D) + (2 * K + 1)  # F_intra and the distance biases
    assert f"Total params: {expected:,}" in out and "decomposable pair classifier" in out
