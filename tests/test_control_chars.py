"""One output line per input line: SentencePiece keeps a piece for each of the 256 bytes, so a model can generate a
newline (<0x0A>), a tab or another control character. The searches never generate the pieces that decode to one
(`Tokenizer.control_ids`, checked against decoding every piece), and text that still holds one (another engine,
a hand-written search, a multi-byte character such as U+0085) is escaped in line-oriented output (`one_line`):
`attnlab translate`, its n-best TSV, `attnlab evaluate`'s hypothesis file. The model under test is pushed toward
<0x0A> (its output bias set far above every other token's)."""

import io
import sys
import unicodedata

import pytest
import torch

from attnlab.app import api
from attnlab.app.cli import main
from attnlab.data.batching import pad_sequences
from attnlab.data.tokenizers import (EOS_ID, PAD_ID, SPECIALS, CharTokenizer, SentencePieceTokenizer, TokenizerConfig,
                                build_tokenizers, is_control, one_line)
from attnlab.decode.sampling import generate
from attnlab.decode.search import beam_search, greedy_search
from attnlab.families.translation import experiment_from_dict
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.runs.workflow import train
from conftest import make_pairs, one_thread

PUSH = 50.0  # added to the output bias of the pushed piece: it wins every step by far
TEXTS = [s for pair in make_pairs(200, seed=4) for s in pair]


def breaks_a_line(text: str) -> bool:
    """The reference: a character of Unicode category Cc (control), Zl or Zp (line/paragraph separator)."""
    return any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


@pytest.fixture(scope="module")
def sp() -> dict[str, SentencePieceTokenizer]:
    return {k: build_tokenizers(TokenizerConfig(kind=k, vocab_size=300), TEXTS, TEXTS).tgt
            for k in ("bpe", "unigram")}


def piece_id(tok, piece: str) -> int:
    return next(i for i in range(tok.vocab_size) if tok.id_to_piece(i) == piece)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_control_ids_are_the_pieces_that_decode_to_a_control_character(sp, kind):
    tok = sp[kind]
    reference = tuple(i for i in range(len(SPECIALS), tok.vocab_size) if breaks_a_line(tok.decode([i])))
    assert tok.control_ids == reference
    assert [tok.id_to_piece(i) for i in reference] == [f"<0x{b:02X}>" for b in [*range(0x20), 0x7F]]


def test_control_ids_of_a_character_vocabulary():
    tok = CharTokenizer(["a", "\x01", "b", "\u2028", "\x7f", "é"])
    assert [tok.id_to_piece(i) for i in tok.control_ids] == ["\x01", "\u2028", "\x7f"]


@pytest.mark.parametrize("text, line", [
    ("plain text, ¿sí? ▁ \\n", "plain text, ¿sí? ▁ \\n"),  # nothing to escape: returned as it is
    ("a\nb", "a\\nb"), ("a\tb\r", "a\\tb\\r"), ("\x00\x1b\x7f", "\\x00\\x1b\\x7f"),
    ("x\x85y\u2028z\u2029", "x\\x85y\\u2028z\\u2029"), ("\x0b\x0c\x1c\x1d\x1e", "\\x0b\\x0c\\x1c\\x1d\\x1e"),
])
def test_one_line(text, line):
    assert one_line(text) == line
    assert is_control(text) == (text != line)


def test_one_line_of_every_character_is_one_line():
    """Against str.splitlines (which breaks at every line boundary Python knows) and the Unicode categories."""
    every = "".join(chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000)
    line = one_line(every)
    assert len(line.splitlines()) == 1 and not breaks_a_line(line)
    assert all(one_line(c) == c for c in every if not breaks_a_line(c))


# ---------------------------------------------------------------------------------------------- searches
def pushed_seq2seq(tok, piece: str = "<0x0A>") -> TransformerSeq2Seq:
    torch.manual_seed(0)
    model = TransformerSeq2Seq(tok.vocab_size, tok.vocab_size,
                               TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1)).eval()
    with torch.no_grad():
        model.generator.bias[piece_id(tok, piece)] += PUSH
    return model


def test_the_searches_never_generate_a_control_piece(sp):
    tok = sp["unigram"]
    model = pushed_seq2seq(tok)
    src = pad_sequences([tok.encode(s) + [EOS_ID] for s in ("the house is big", "my cat")])  # (2, S)
    lengths = (src != PAD_ID).sum(1)
    newline = piece_id(tok, "<0x0A>")
    # without the mask (a search that is not told) the pushed piece is all it generates
    assert all(h[0].tokens == [newline] * 12 for h in greedy_search(model, src, lengths, 12))
    greedy = greedy_search(model, src, lengths, 12, banned=tok.control_ids)
    beams = beam_search(model, src, lengths, 4, 12, n_best=4, banned=tok.control_ids)
    for hyps in [*greedy, *beams]:
        for h in hyps:
            assert not set(h.tokens) & set(tok.control_ids) and not breaks_a_line(tok.decode(h.tokens))
    # the masked greedy search is the search of a model that cannot generate those pieces at all
    with torch.no_grad():
        model.generator.bias[list(tok.control_ids)] = -1e9
    assert [h[0].tokens for h in greedy_search(model, src, lengths, 12)] == [h[0].tokens for h in greedy]


def test_language_model_samples_never_hold_a_control_piece(sp):
    tok = sp["unigram"]
    torch.manual_seed(0)
    lm = TransformerLM(tok.vocab_size, LMModelConfig(d_model=16, h=2, d_ff=32, layers=1, max_len=64,
                                                     tie_embeddings=False)).eval()
    with torch.no_grad():
        lm.generator.bias[piece_id(tok, "<0x09>")] += PUSH
    for temperature in (0.0, 1.0):
        for s in generate(lm, tok, "the", num=4, max_len=20, temperature=temperature):
            assert not set(s.tokens) & set(tok.control_ids) and not breaks_a_line(s.text)


# ---------------------------------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def sp_run(tiny_tsv, tmp_path_factory):
    """A Transformer run of the synthetic task with a SentencePiece tokenizer (byte pieces), trained one step."""
    d = tmp_path_factory.mktemp("sp_run")
    cfg = experiment_from_dict({
        "data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                 "test": [str(tiny_tsv / "test.tsv")]},
        "tokenizer": {"kind": "unigram", "vocab_size": 300},
        "model": {"family": "transformer", "transformer": {"d_model": 16, "h": 2, "d_ff": 32, "enc_layers": 1,
                                                           "dec_layers": 1}},
        "train": {"max_steps": 1, "max_tokens": 400, "eval_every": 1, "progress": False, "keep_last": 1,
                  "eval_max_sentences": 2},
        "decode": {"beam_size": 3}})
    with one_thread():
        train(cfg, d / "run")
    return d / "run"


@pytest.fixture
def pushed(monkeypatch):
    """`attnlab.load` (what the CLI calls) gives runs whose model is pushed toward <0x0A>."""
    load = api.load

    def pushed_load(*args, **kw):
        run = load(*args, **kw)
        with torch.no_grad():
            run.model.generator.bias[piece_id(run.tokenizers.tgt, "<0x0A>")] += PUSH
        return run

    monkeypatch.setattr(api, "load", pushed_load)


INPUT = "the house is big\nmy cat\n"


@pytest.mark.parametrize("options, lines_per_input", [([], 1), (["--beam", "1"], 1), (["--n-best", "3"], 3)])
def test_translate_writes_one_line_per_input_line(sp_run, pushed, tmp_path, options, lines_per_input):
    """Before the mask: 51 lines for these 2 (100 with --n-best 2), exit 0."""
    (tmp_path / "in.txt").write_text(INPUT, encoding="utf-8")
    assert main(["translate", str(sp_run), str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), *options]) == 0
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == 2 * lines_per_input
    if lines_per_input > 1:
        assert [ln.split("\t")[0] for ln in lines[:-1]] == ["0"] * 3 + ["1"] * 3


def test_standard_input_is_split_as_a_file_is(sp_run, monkeypatch, capsys):
    """At "\\n" only: a vertical tab or U+2028 inside a line (str.splitlines breaks there) keeps it one line."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("the\x0bhouse\u2028is\nmy cat\r\n".encode())))
    assert main(["translate", str(sp_run), "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 3


@pytest.fixture
def decodes_controls(monkeypatch):
    """Text that holds control characters after the search (as another engine's could): every decoded output ends
    in a multi-byte NEL (U+0085, which no single piece is), a newline and a line separator."""
    decode = SentencePieceTokenizer.decode
    monkeypatch.setattr(SentencePieceTokenizer, "decode", lambda self, ids: decode(self, ids) + "\x85\n\u2028.")


def test_translate_and_its_n_best_escape_what_the_text_still_holds(sp_run, decodes_controls, tmp_path):
    (tmp_path / "in.txt").write_text(INPUT, encoding="utf-8")
    for options, rows in (([], 2), (["--n-best", "2"], 4)):
        assert main(["translate", str(sp_run), str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"),
                     *options]) == 0
        lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
        assert len(lines) == rows and all(ln.endswith("\\x85\\n\\u2028.") for ln in lines)


def test_evaluate_writes_one_hypothesis_line_per_sentence(sp_run, decodes_controls, capsys):
    assert main(["evaluate", str(sp_run), "--split", "test", "--beam", "1"]) == 0
    hyps = (sp_run / "eval" / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 40  # the test pairs of tiny_tsv
    assert all(h.endswith("\\x85\\n\\u2028.") for h in hyps)
