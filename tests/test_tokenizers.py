"""Tokenizers: fixed special ids, exact round trips (hypothesis), joint vs separate vocabularies, save/load,
config validation. Trained on a small generated English/Spanish-like corpus."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import (BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, UNK_SURFACE, CharTokenizer,
                                SentencePieceTokenizer, TokenizerConfig, TokenizerPair, build_tokenizers,
                                load_tokenizers, save_tokenizers)

PROPERTY = settings(derandomize=True, max_examples=80, deadline=None, database=None)
SP_KINDS = ("bpe", "unigram")
SP_VOCAB = 400  # 4 specials + 256 bytes + ~50 characters + merges


def _words(rng: random.Random, onsets: list[str], vowels: list[str], codas: list[str], n: int) -> list[str]:
    return ["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(rng.randint(1, 3))) for _ in range(n)]


def _corpus() -> tuple[list[str], list[str]]:
    """400 sentence pairs: English-like source (ASCII), Spanish-like target with ñ, accents, ¿ and ¡."""
    rng = random.Random(1234)
    en = _words(rng, ["th", "w", "s", "b", "k", "l", "m", "st", "r"], ["a", "e", "i", "o", "ou", "ee"],
                ["", "n", "t", "rd", "ng", "s"], 150)
    es = _words(rng, ["", "c", "d", "ñ", "ll", "p", "rr", "t", "v"], ["a", "e", "i", "o", "u", "á", "é", "í",
                                                                      "ó", "ú", "ue"], ["", "n", "s", "l", "r"], 150)
    src, tgt = [], []
    for _ in range(400):
        n = rng.randint(3, 12)
        src.append(" ".join(rng.choice(en) for _ in range(n)).capitalize() + rng.choice([".", "?", "!", ","]))
        body = " ".join(rng.choice(es) for _ in range(n)).capitalize()
        tgt.append(rng.choice([f"¿{body}?", f"¡{body}!", f"{body}."]))
    return src, tgt


SRC, TGT = _corpus()
TRAIN_WORDS = sorted({w for s in SRC + TGT for w in s.split()})
TGT_CHARS = sorted(set("".join(TGT)))

# Any text SentencePiece can round-trip: no U+2581 (its space symbol), no lone surrogate (not UTF-8).
any_char = st.characters(blacklist_categories=("Cs",), blacklist_characters="\u2581")
any_text = st.text(any_char, max_size=40)
# Whitespace-normalized sentences mixing training words and unseen strings (byte fallback territory).
normalized_text = st.lists(st.one_of(st.sampled_from(TRAIN_WORDS),
                                     st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"),
                                                           blacklist_characters="\u2581"), min_size=1, max_size=6)),
                           max_size=10).map(" ".join)


@pytest.fixture(scope="module")
def sp_joint() -> dict[str, TokenizerPair]:
    return {k: build_tokenizers(TokenizerConfig(kind=k, vocab_size=SP_VOCAB), SRC, TGT) for k in SP_KINDS}


@pytest.fixture(scope="module")
def char_pair() -> TokenizerPair:
    return build_tokenizers(TokenizerConfig(kind="char", joint=False), SRC, TGT)


@pytest.mark.parametrize("kind", SP_KINDS)
@PROPERTY
@given(text=st.one_of(normalized_text, any_text))
def test_sentencepiece_round_trip(sp_joint, kind, text):
    tok = sp_joint[kind].src
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert min(ids, default=UNK_ID + 1) > UNK_ID  # byte fallback: never a special, not even UNK


@pytest.mark.parametrize("kind", SP_KINDS)
@pytest.mark.parametrize("text", [" leading", "trailing ", "two  spaces", "tab\there", "line\nbreak", "", " ",
                                  "nbsp\u00a0x", "e\u0301 vs é", "<s> </s> <unk>", "☃ 日本語 🙂"])
def test_sentencepiece_keeps_text_unaltered(sp_joint, kind, text):
    tok = sp_joint[kind].src
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("kind", SP_KINDS)
def test_sentencepiece_space_symbol_is_the_one_exception(sp_joint, kind):
    tok = sp_joint[kind].src
    assert tok.decode(tok.encode("a\u2581b")) == "a b"


@pytest.mark.parametrize("kind", SP_KINDS)
def test_unseen_character_becomes_utf8_bytes(sp_joint, kind):
    tok = sp_joint[kind].src
    pieces = tok.pieces("☃")  # U+2603, E2 98 83 in UTF-8, absent from the corpus
    assert pieces[-3:] == ["<0xE2>", "<0x98>", "<0x83>"]
    assert [tok.id_to_piece(i) for i in tok.encode("☃")] == pieces


def test_without_byte_fallback_unseen_character_is_unk():
    tok = build_tokenizers(TokenizerConfig(kind="bpe", vocab_size=120, byte_fallback=False), SRC, TGT).src
    ids = tok.encode("☃")
    assert UNK_ID in ids
    assert tok.decode(ids) == UNK_SURFACE


@PROPERTY
@given(text=st.text(st.sampled_from(TGT_CHARS), max_size=60))
def test_char_round_trip_over_training_alphabet(char_pair, text):
    tok = char_pair.tgt  # trained on TGT only
    ids = tok.encode(text)
    assert len(ids) == len(text) and min(ids, default=UNK_ID + 1) > UNK_ID
    assert tok.decode(ids) == text


def test_char_vocabulary_and_unknown(char_pair):
    tok = char_pair.src
    assert [tok.id_to_piece(i) for i in range(4, tok.vocab_size)] == sorted(set("".join(SRC)))
    a = tok.encode("a")[0]
    assert tok.encode("a☃a") == [a, UNK_ID, a]
    assert tok.pieces("a☃") == ["a", "<unk>"]
    assert tok.decode([BOS_ID, a, UNK_ID, EOS_ID, PAD_ID]) == "a" + UNK_SURFACE


@pytest.mark.parametrize("kind", ["char", *SP_KINDS])
@pytest.mark.parametrize("joint", [True, False])
def test_special_ids_are_fixed(kind, joint):
    pair = build_tokenizers(TokenizerConfig(kind=kind, vocab_size=SP_VOCAB, joint=joint), SRC[:100], TGT[:100])
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    for tok, own, other in ((pair.src, SRC[:100], TGT[:100]), (pair.tgt, TGT[:100], SRC[:100])):
        assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"] == list(SPECIALS)
        assert not {PAD_ID, BOS_ID, EOS_ID, UNK_ID} & {i for s in own for i in tok.encode(s)}
        assert not {PAD_ID, BOS_ID, EOS_ID} & {i for s in other + ["☃"] for i in tok.encode(s)}
        assert tok.decode([BOS_ID, *tok.encode("ta ta"), EOS_ID, PAD_ID, PAD_ID]) == "ta ta"


@pytest.mark.parametrize("kind", SP_KINDS)
@pytest.mark.parametrize("vocab_size", [320, 380])
def test_vocab_size_is_respected(kind, vocab_size):
    tok = build_tokenizers(TokenizerConfig(kind=kind, vocab_size=vocab_size), SRC, TGT).src
    assert tok.vocab_size == vocab_size
    assert max(i for s in SRC + TGT for i in tok.encode(s)) < vocab_size


def test_training_is_deterministic(sp_joint):
    for kind in SP_KINDS:
        again = build_tokenizers(TokenizerConfig(kind=kind, vocab_size=SP_VOCAB), SRC, TGT)
        assert again.src.to_bytes() == sp_joint[kind].src.to_bytes()


def test_joint_shares_one_tokenizer(sp_joint):
    pair = sp_joint["unigram"]
    assert pair.joint and pair.src is pair.tgt
    pieces = {pair.src.id_to_piece(i) for i in range(pair.src.vocab_size)}
    assert "ñ" in pieces and "k" in pieces  # trained on both sides


@pytest.mark.parametrize("kind", ["char", *SP_KINDS])
def test_separate_vocabularies_differ(kind):
    pair = build_tokenizers(TokenizerConfig(kind=kind, vocab_size=SP_VOCAB, joint=False), SRC, TGT)
    assert not pair.joint and pair.src is not pair.tgt
    src_pieces = {pair.src.id_to_piece(i) for i in range(pair.src.vocab_size)}
    tgt_pieces = {pair.tgt.id_to_piece(i) for i in range(pair.tgt.vocab_size)}
    assert "ñ" in tgt_pieces and "ñ" not in src_pieces
    assert "k" in src_pieces and "k" not in tgt_pieces


def test_joint_pair_must_share_the_object(char_pair):
    with pytest.raises(AttnlabError, match="same tokenizer"):
        TokenizerPair(char_pair.src, char_pair.tgt, joint=True)


@pytest.mark.parametrize("kind", ["char", *SP_KINDS])
@pytest.mark.parametrize("joint", [True, False])
def test_save_load_round_trip(tmp_path, kind, joint):
    cfg = TokenizerConfig(kind=kind, vocab_size=SP_VOCAB, joint=joint)
    pair = build_tokenizers(cfg, SRC, TGT)
    save_tokenizers(pair, tmp_path / "tok")
    loaded = load_tokenizers(tmp_path / "tok")
    assert loaded.joint == joint and loaded.config == cfg and (loaded.src is loaded.tgt) == joint
    meta = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    assert (meta["kind"], meta["joint"], meta["config"]["vocab_size"]) == (kind, joint, SP_VOCAB)
    for side, texts in (("src", SRC), ("tgt", TGT)):
        before, after = getattr(pair, side), getattr(loaded, side)
        assert type(after) is type(before) and after.kind == before.kind
        assert after.vocab_size == before.vocab_size and after.to_bytes() == before.to_bytes()
        assert [after.encode(t) for t in texts[:50] + ["☃ x"]] == [before.encode(t) for t in texts[:50] + ["☃ x"]]
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".")]  # no temp files left


def test_load_missing_directory_names_path(tmp_path):
    with pytest.raises(AttnlabError, match=r"no saved tokenizer in .*nowhere"):
        load_tokenizers(tmp_path / "nowhere")


def test_load_corrupt_files_name_path(tmp_path, sp_joint):
    save_tokenizers(sp_joint["bpe"], tmp_path)
    (tmp_path / "src.model").write_bytes(b"not a model")
    with pytest.raises(AttnlabError, match=r"src\.model"):
        load_tokenizers(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{half a file")
    with pytest.raises(AttnlabError, match=r"corrupt tokenizer file .*tokenizer\.json"):
        load_tokenizers(tmp_path)


@pytest.mark.parametrize("content", [b"", b"\x0a\x05hello" * 10], ids=["empty", "pieces-without-specials"])
def test_an_empty_or_foreign_sentencepiece_model_names_the_file(tmp_path, sp_joint, content):
    """An empty file parses as a SentencePiece model without pieces (it used to crash reading the special ids)."""
    save_tokenizers(sp_joint["unigram"], tmp_path)
    (tmp_path / "src.model").write_bytes(content)
    with pytest.raises(AttnlabError, match=r"cannot load tokenizer .*src\.model: not a SentencePiece model"):
        load_tokenizers(tmp_path)


def test_a_tokenizer_config_out_of_range_is_refused(tmp_path, sp_joint):
    save_tokenizers(sp_joint["bpe"], tmp_path)
    meta = json.loads((tmp_path / "tokenizer.json").read_text())
    meta["config"]["vocab_size"] = 10**30
    (tmp_path / "tokenizer.json").write_text(json.dumps(meta))
    with pytest.raises(AttnlabError, match=r"tokenizer\.json: vocab_size = 10+ exceeds the limit 1048576"):
        load_tokenizers(tmp_path)


def test_saving_where_a_file_stands_is_a_user_error(tmp_path, sp_joint):
    (tmp_path / "tok").write_text("x")
    with pytest.raises(AttnlabError, match=r"tok: a file of that name exists"):
        save_tokenizers(sp_joint["bpe"], tmp_path / "tok")


def test_corrupt_char_vocabulary_is_rejected():
    with pytest.raises(AttnlabError, match="bad: \\['ab', 'x'\\]"):
        CharTokenizer(["ab", "x", "x"])
    with pytest.raises(AttnlabError, match="not a character vocabulary"):
        CharTokenizer.from_bytes(b'{"kind": "bpe"}')
    with pytest.raises(AttnlabError, match="not a SentencePiece model"):
        SentencePieceTokenizer.from_bytes(b"junk", "bpe")


def test_config_rejects_bad_kind_naming_options():
    with pytest.raises(AttnlabError, match=r"kind 'wordpiece' is not one of 'char', 'bpe', 'unigram'"):
        TokenizerConfig(kind="wordpiece")


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 100}, r"vocab_size \(100\) must be at least 261"),
    ({"vocab_size": 4, "byte_fallback": False}, r"vocab_size \(4\) must be at least 5"),
    ({"character_coverage": 0.0}, r"character_coverage \(0.0\) must be in \(0, 1\]"),
    ({"character_coverage": 1.5}, r"character_coverage \(1.5\)"),
])
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(AttnlabError, match=message):
        TokenizerConfig(**kwargs)


def test_char_ignores_vocab_size():
    assert TokenizerConfig(kind="char", vocab_size=1).vocab_size == 1


def test_vocab_too_small_for_corpus_is_a_user_error():
    with pytest.raises(AttnlabError, match=r"vocab_size 262 failed: .*smaller than required_chars"):
        build_tokenizers(TokenizerConfig(kind="unigram", vocab_size=262), SRC, TGT)


@pytest.mark.parametrize("kind", ["char", *SP_KINDS])
def test_empty_train_split_is_a_user_error(kind):
    with pytest.raises(AttnlabError, match="train split is empty"):
        build_tokenizers(TokenizerConfig(kind=kind, vocab_size=300), [], [""])
