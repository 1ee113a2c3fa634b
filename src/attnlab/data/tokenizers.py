"""Tokenizers: characters (as in the Keras character-level seq2seq example) or SentencePiece subwords (BPE,
Sennrich et al. 2016; unigram LM, Kudo 2018), trained on the train split only.

Every tokenizer shares the same four special ids (PAD 0, BOS 1, EOS 2, UNK 3). `encode` adds no BOS/EOS;
callers append EOS themselves. `decode` drops PAD/BOS/EOS and shows UNK as "⁇".

Control characters (`is_control`: Unicode's Cc, i.e. U+0000-U+001F and U+007F-U+009F, and the line and paragraph
separators U+2028/U+2029) end or garble a line of a line-oriented file. SentencePiece's byte fallback keeps a piece
for each of the 256 bytes, so a model could generate a newline (<0x0A>): every tokenizer lists the ids of its pieces
that decode to control characters (`control_ids`), which the searches never generate, and `one_line` escapes any
that still reach line-oriented output (a sequence of byte pieces such as <0xC2><0x85> = U+0085, or text from
another engine).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import sentencepiece as spm
from tokenizers import Tokenizer as HFLibraryTokenizer

from attnlab.core.config import MAX_COUNT, MAX_SEED, MAX_VOCAB, from_dict
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_bytes, cache_dir

log = logging.getLogger("attnlab")

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # indexed by id
UNK_SURFACE = "\u2047"  # "⁇", what decode shows for UNK_ID (SentencePiece's own unknown symbol)
_SKIPPED_IDS = frozenset((PAD_ID, BOS_ID, EOS_ID))
_NUM_BYTE_PIECES = 256
FORMAT_VERSION = 1

# What `is_control` matches: Unicode's Cc category (C0, DEL, C1) and the line/paragraph separators, every character
# that str.splitlines() breaks a line at included.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def is_control(text: str) -> bool:
    """Whether text holds a control character (U+0000-U+001F, U+007F-U+009F, U+2028, U+2029)."""
    return _CONTROL.search(text) is not None


def piece_is_control(sp: spm.SentencePieceProcessor, i: int) -> bool:
    """Whether SentencePiece id i decodes to a control character: a byte piece <0x00>..<0x1F> or <0x7F> (a byte
    >= 0x80 is part of a multi-byte character and cannot be judged alone), or a piece whose text holds one."""
    piece = sp.id_to_piece(i)
    if sp.is_byte(i):
        value = int(piece[3:-1], 16)  # "<0x0A>"
        return value < 0x20 or value == 0x7F
    return is_control(piece)


def one_line(text: str) -> str:
    """text as one line of a line-oriented file: each control character escaped as Python writes it in a string
    literal ("\\n", "\\t", "\\r", "\\x1b", "\\u2028"); text without one is returned as it is. Backslashes are kept as
    they are, so the escape is for reading, not reversible."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), ascii(m.group())[1:-1]), text)


@dataclass
class TokenizerConfig:
    """How to tokenize. vocab_size is ignored for "char"; character_coverage and byte_fallback apply to the
    SentencePiece kinds only. joint: one vocabulary for source and target, trained on both sides."""

    # marian, huggingface: an imported model's tokenizer (`MarianVocabTokenizer`, `ImportedTokenizer`: made by
    # `attnlab import`, never trained)
    CHOICES: ClassVar[dict] = {"kind": ("char", "bpe", "unigram", "marian", "huggingface")}
    LIMITS: ClassVar[dict] = {"vocab_size": (1, MAX_VOCAB), "character_coverage": (0.0, 1.0),
                              "sample_sentences": (1, MAX_COUNT), "sample_seed": (0, MAX_SEED)}

    kind: str = "unigram"
    vocab_size: int = 8000
    joint: bool = True
    character_coverage: float = 1.0
    byte_fallback: bool = True
    # trained on at most this many training sentences, a seeded random sample (all of them when fewer): the cost
    # of training stops growing with the corpus (SentencePiece's input_sentence_size)
    sample_sentences: int = 300_000
    sample_seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in self.CHOICES["kind"]:
            raise AttnlabError(f"kind {self.kind!r} is not one of "
                               f"{', '.join(repr(k) for k in self.CHOICES['kind'])}")
        if not 0.0 < self.character_coverage <= 1.0:
            raise AttnlabError(f"character_coverage ({self.character_coverage}) must be in (0, 1]")
        minimum = len(SPECIALS) + (_NUM_BYTE_PIECES if self.byte_fallback else 0) + 1
        if self.kind != "char" and self.vocab_size < minimum:
            raise AttnlabError(f"vocab_size ({self.vocab_size}) must be at least {minimum} for "
                               f"{self.kind!r} (4 special ids{' + 256 byte pieces' * self.byte_fallback} "
                               f"+ the characters of the corpus)")


class CharTokenizer:
    """One token per character. Vocabulary: the four specials, then the sorted characters of the training
    texts; any other character encodes to UNK_ID.

    Round trip: decode(encode(x)) == x exactly when every character of x is in the vocabulary.
    """

    kind = "char"

    def __init__(self, chars: Sequence[str]) -> None:
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        bad += sorted(c for c, n in Counter(chars).items() if n > 1 and c not in bad)
        if bad:
            raise AttnlabError(f"a character vocabulary needs distinct single characters; bad: {bad[:5]!r}")
        self._pieces = list(SPECIALS) + list(chars)
        self._index = {c: i for i, c in enumerate(self._pieces) if i >= len(SPECIALS)}

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        """The vocabulary of all characters in texts (train split only)."""
        chars = set().union(*map(set, texts))
        if not chars:
            raise AttnlabError("cannot train a tokenizer on no text (the train split is empty)")
        return cls(sorted(chars))

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def encode(self, text: str) -> list[int]:
        """Token ids of text, without BOS/EOS."""
        return [self._index.get(c, UNK_ID) for c in text]

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Token ids of each text (as `encode`); threads is unused (a character lookup is not worth a thread)."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ids: PAD/BOS/EOS dropped, UNK shown as "⁇"."""
        return "".join(UNK_SURFACE if i == UNK_ID else self._pieces[i] for i in ids if i not in _SKIPPED_IDS)

    def id_to_piece(self, i: int) -> str:
        return self._pieces[i]

    @functools.cached_property
    def control_ids(self) -> tuple[int, ...]:
        """The ids of the characters that are control characters (`is_control`), ascending."""
        return tuple(i for i, c in enumerate(self._pieces) if i >= len(SPECIALS) and is_control(c))

    def pieces(self, text: str) -> list[str]:
        """The token strings of text (labels for attention plots)."""
        return [self._pieces[i] for i in self.encode(text)]

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": self.kind, "chars": self._pieces[len(SPECIALS):]}, ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> CharTokenizer:
        obj = json.loads(data.decode("utf-8"))
        if not isinstance(obj, dict) or obj.get("kind") != cls.kind or not isinstance(obj.get("chars"), list):
            raise AttnlabError("not a character vocabulary (expected {'kind': 'char', 'chars': [...]})")
        return cls(obj["chars"])


class SentencePieceTokenizer:
    """A SentencePiece BPE or unigram model, trained in memory with the identity normalization.

    Round trip: with byte_fallback, decode(encode(x)) == x for every str x that does not contain U+2581
    ("▁", SentencePiece's whitespace symbol, which decodes as a space) and has no lone surrogate (not
    UTF-8). This holds because the model is trained with normalization_rule_name="identity" (no NFKC),
    remove_extra_whitespaces=False (leading, trailing and repeated spaces are kept, not collapsed) and
    add_dummy_prefix=True (decode strips exactly the one "▁" that encode prepends); characters outside the
    vocabulary become UTF-8 byte pieces, never UNK. In particular every whitespace-normalized text round
    trips. Without byte_fallback, characters outside the vocabulary encode to UNK_ID and decode as "⁇".
    """

    def __init__(self, model_proto: bytes, kind: str) -> None:
        if kind not in ("bpe", "unigram"):
            raise AttnlabError(f"SentencePiece kind {kind!r} is not one of 'bpe', 'unigram'")
        self.kind = kind
        self._proto = bytes(model_proto)
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        except RuntimeError as e:
            raise AttnlabError(f"not a SentencePiece model ({str(e).strip()[:120]})") from None
        if self._sp.get_piece_size() < len(SPECIALS):  # an empty file parses as a model without pieces
            raise AttnlabError(f"not a SentencePiece model of attnlab: {self._sp.get_piece_size()} pieces, fewer than "
                               f"the {len(SPECIALS)} special ones ({len(self._proto)} bytes)")
        specials = [self._sp.id_to_piece(i) for i in range(len(SPECIALS))]
        if specials != list(SPECIALS):
            raise AttnlabError(f"SentencePiece model has specials {specials}, expected {list(SPECIALS)}")

    @classmethod
    def train(cls, texts: Iterable[str], cfg: TokenizerConfig) -> SentencePieceTokenizer:
        """Trains cfg.kind ("bpe" or "unigram") on texts (train split only). Deterministic: all sentences
        are used (no sampling) on one thread, so the model does not depend on the machine's core count."""
        assert cfg.kind in ("bpe", "unigram"), f"SentencePiece cannot train kind {cfg.kind!r}"
        sentences = [t for t in texts if t]
        if not sentences:
            raise AttnlabError("cannot train a tokenizer on no text (the train split is empty)")
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_writer=model, model_type=cfg.kind,
                vocab_size=cfg.vocab_size, hard_vocab_limit=False, character_coverage=cfg.character_coverage,
                byte_fallback=cfg.byte_fallback, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
                pad_piece=SPECIALS[PAD_ID], bos_piece=SPECIALS[BOS_ID], eos_piece=SPECIALS[EOS_ID],
                unk_piece=SPECIALS[UNK_ID], unk_surface=UNK_SURFACE, normalization_rule_name="identity",
                remove_extra_whitespaces=False, add_dummy_prefix=True, input_sentence_size=0,
                num_threads=1, minloglevel=2)
        except RuntimeError as e:
            raise AttnlabError(f"training a {cfg.kind} tokenizer with vocab_size {cfg.vocab_size} failed: "
                               f"{str(e).strip().split('] ')[-1]}") from None
        return cls(model.getvalue(), cfg.kind)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of text, without BOS/EOS."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        """Token ids of each text (as `encode`), encoded by SentencePiece's own thread pool of `threads`."""
        return self._sp.encode(list(texts), num_threads=threads)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ids: PAD/BOS/EOS dropped, UNK shown as "⁇"."""
        return self._sp.decode([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    @functools.cached_property
    def control_ids(self) -> tuple[int, ...]:
        """The ids of the pieces that decode to a control character (`is_control`), ascending: the byte pieces
        <0x00>..<0x1F> and <0x7F>, and any piece whose own text holds one. (A byte >= 0x80 is part of a multi-byte
        character and cannot be judged alone.)"""
        return tuple(i for i in range(len(SPECIALS), self._sp.get_piece_size()) if piece_is_control(self._sp, i))

    def pieces(self, text: str) -> list[str]:
        """The token strings of text ("▁" marks a preceding space, "<0xE2>" a byte) for attention plots."""
        return self._sp.encode(text, out_type=str)

    def to_bytes(self) -> bytes:
        return self._proto

    @classmethod
    def from_bytes(cls, data: bytes, kind: str) -> SentencePieceTokenizer:
        """The model serialized by to_bytes (the model type is not readable without protobuf, so give it)."""
        return cls(data, kind)


class MarianVocabTokenizer:
    """The tokenizer of an imported MarianMT model (`attnlab import`, `attnlab.interop.huggingface`), as Hugging
    Face's MarianTokenizer computes it: the source SentencePiece model splits text into pieces, the model's
    vocab.json maps each piece to its id (a piece it lacks is <unk>), and `rows` maps ids to attnlab's: rows[i] is
    the Hugging Face id of attnlab id i (PAD 0, BOS 1, EOS 2, UNK 3 first; -1: a row Hugging Face has not, the PAD
    of a model whose pad is its decoder start). One object serves both sides, as the shared vocab.json does; the
    target model travels along for the export (`to_bytes`).

    decode copies MarianTokenizer.decode(skip_special_tokens=True): PAD, BOS, EOS and UNK dropped (attnlab's own
    tokenizers show UNK as "⁇"), the pieces joined by the *source* model, "▁" of a piece it lacks made a space,
    leading and trailing spaces stripped.
    """

    kind = "marian"

    def __init__(self, source_spm: bytes, target_spm: bytes, vocab: dict[str, int], rows: Sequence[int],
                 specials: dict[str, int]) -> None:
        try:
            self._src = spm.SentencePieceProcessor(model_proto=bytes(source_spm))
            self._tgt = spm.SentencePieceProcessor(model_proto=bytes(target_spm))
        except RuntimeError as e:
            raise AttnlabError(f"not a SentencePiece model ({str(e).strip()[:120]})") from None
        self.source_spm, self.target_spm = bytes(source_spm), bytes(target_spm)
        self.vocab, self.rows, self.specials = dict(vocab), [int(r) for r in rows], dict(specials)
        self._piece = {i: p for p, i in self.vocab.items()}
        self._ids = {h: a for a, h in enumerate(self.rows) if h >= 0}
        if "<unk>" not in self.vocab or len(self._ids) != len(self._piece) or set(self._ids) != set(self._piece):
            raise AttnlabError(f"vocab.json and the row order disagree ({len(self._piece)} ids, {len(self._ids)} rows, "
                               "<unk> needed)")

    @property
    def vocab_size(self) -> int:
        return len(self.rows)

    def pieces(self, text: str) -> list[str]:
        """The pieces of text as the model sees them (a piece missing from vocab.json shown as <unk>)."""
        return [p if p in self.vocab else "<unk>" for p in self._src.encode(text, out_type=str)]

    def encode(self, text: str) -> list[int]:
        return [self._ids[self.vocab[p]] for p in self.pieces(text)]

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self._piece[self.rows[int(i)]] for i in ids if int(i) > UNK_ID]
        return self._src.decode_pieces(pieces).replace("\u2581", " ").strip()

    def id_to_piece(self, i: int) -> str:
        return SPECIALS[PAD_ID] if self.rows[int(i)] < 0 else self._piece[self.rows[int(i)]]

    def hf_piece(self, hf_id: int) -> str:
        """The piece of a Hugging Face id (vocab.json's)."""
        return self._piece[int(hf_id)]

    @functools.cached_property
    def control_ids(self) -> tuple[int, ...]:
        """The ids whose piece decodes to a control character, ascending: a piece holding one (`is_control`), and
        a byte piece of the target model <0x00>..<0x1F> or <0x7F> (as `SentencePieceTokenizer.control_ids`)."""
        out = []
        for i in range(len(SPECIALS), self.vocab_size):
            piece = self.id_to_piece(i)
            j = self._tgt.piece_to_id(piece)  # the target model's id of the piece (its <unk> for one it lacks)
            if piece_is_control(self._tgt, j) if self._tgt.id_to_piece(j) == piece else is_control(piece):
                out.append(i)
        return tuple(out)

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": self.kind, "source_spm": base64.b64encode(self.source_spm).decode(),
                           "target_spm": base64.b64encode(self.target_spm).decode(), "vocab": self.vocab,
                           "rows": self.rows, "specials": self.specials}, ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> MarianVocabTokenizer:
        obj = json.loads(data.decode("utf-8"))
        if not isinstance(obj, dict) or obj.get("kind") != cls.kind:
            raise AttnlabError("not an imported Marian tokenizer (expected {'kind': 'marian', ...})")
        return cls(base64.b64decode(obj["source_spm"]), base64.b64decode(obj["target_spm"]), obj["vocab"],
                   obj["rows"], obj["specials"])


class ImportedTokenizer:
    """The tokenizer of an imported GPT-2-class or BERT-class model (`attnlab import`, `attnlab.interop`): a Hugging
    Face `tokenizers` tokenizer (its tokenizer.json: GPT-2's byte-level BPE, BERT's WordPiece, or the one an attnlab
    export writes), run by the same library Hugging Face runs it with, so the pieces and ids are its own; `rows`
    maps them to attnlab's: rows[i] is the Hugging Face id of attnlab id i (PAD 0, BOS 1, EOS 2, UNK 3 first; -1:
    a row Hugging Face has not, e.g. GPT-2's PAD and UNK). A Hugging Face id on several rows (GPT-2's
    <|endoftext|> is its BOS and its EOS) encodes to the last of them.

    decode drops PAD, BOS, EOS and UNK and lets the library join the rest (skip_special_tokens). id_to_piece shows
    a byte-level piece as its text with "\u2581" for a space ("Ġthe" -> "\u2581the", as SentencePiece writes it)
    where that text is whole UTF-8 and names one id, else as the library stores it; WordPiece pieces as they are
    ("##ing"). `scheme`: how the pieces form words ("wordpiece" or "sentencepiece"), for the word toggle.
    """

    kind = "huggingface"

    def __init__(self, tokenizer_json: str, rows: Sequence[int], specials: dict[str, int | None]) -> None:
        try:
            self._tok = HFLibraryTokenizer.from_str(tokenizer_json)
            spec = json.loads(tokenizer_json)
        except Exception as e:  # the library raises its own Exception type for a malformed file
            raise AttnlabError(f"not a Hugging Face tokenizer.json ({str(e).strip()[:120]})") from None
        self.tokenizer_json, self.rows, self.specials = tokenizer_json, [int(r) for r in rows], dict(specials)
        self._ids = {h: a for a, h in enumerate(self.rows) if h >= 0}  # the last row of an id wins
        n = self._tok.get_vocab_size(with_added_tokens=True)
        missing = [h for h in range(n) if h not in self._ids and self._tok.id_to_token(h) is not None]
        if missing or len(self.rows) < len(SPECIALS):
            raise AttnlabError(f"the tokenizer has {n} ids and the model rows for {len(self._ids)} of them (id "
                               f"{missing[0] if missing else '?'} has none); the tokenizer and the model disagree")
        self.scheme = "wordpiece" if (spec.get("model") or {}).get("type") == "WordPiece" else "sentencepiece"
        self._byte_level = _has_type(spec.get("decoder"), "ByteLevel")
        self._tok.no_padding()
        self._tok.no_truncation()

    @property
    def vocab_size(self) -> int:
        return len(self.rows)

    def _attnlab(self, hf_ids: Sequence[int]) -> list[int]:
        return [self._ids[h] for h in hf_ids]

    def encode(self, text: str) -> list[int]:
        """attnlab ids of text, without the tokenizer's own specials (no [CLS]/[SEP], no BOS)."""
        return self._attnlab(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str], threads: int = 1) -> list[list[int]]:
        return [self._attnlab(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_pair(self, a: str, b: str | None = None) -> tuple[list[int], list[int]]:
        """(ids, token types) of a sentence or a pair with the tokenizer's specials, as Hugging Face's tokenizer
        (text, text_pair) gives them: BERT's [CLS] a [SEP] b [SEP], types 0 ... 0 1 ... 1."""
        e = self._tok.encode(a, b, add_special_tokens=True)
        return self._attnlab(e.ids), list(e.type_ids)

    def decode(self, ids: Sequence[int]) -> str:
        hf = [self.rows[int(i)] for i in ids if int(i) > UNK_ID and self.rows[int(i)] >= 0]
        return self._tok.decode(hf, skip_special_tokens=True)

    @functools.cached_property
    def _pieces(self) -> list[str]:
        """The piece shown for each attnlab id (see the class docstring); the specials as attnlab names them."""
        raw = [self._tok.id_to_token(h) if h >= 0 and self._tok.id_to_token(h) else SPECIALS[i] if i < len(SPECIALS)
               else f"<id {h}>" for i, h in enumerate(self.rows)]
        if not self._byte_level:
            return raw
        shown = list(raw)
        texts = self._tok.decode_batch([[h] for h in self.rows[len(SPECIALS):]], skip_special_tokens=False)
        for i, text in enumerate(texts, len(SPECIALS)):
            if "\ufffd" not in text and not is_control(text) and text:
                shown[i] = text.replace(" ", "\u2581")
        while True:  # a shown text that two ids share (or that is another id's raw piece) goes back to raw
            seen = Counter(shown)
            clash = [i for i, p in enumerate(shown) if seen[p] > 1 and p != raw[i]]
            if not clash:
                return shown
            for i in clash:
                shown[i] = raw[i]

    def id_to_piece(self, i: int) -> str:
        return self._pieces[int(i)]

    def token(self, hf_id: int | None) -> str | None:
        """The library's own token string of a Hugging Face id (None: no id, or one the tokenizer has not)."""
        return None if hf_id is None or hf_id < 0 else self._tok.id_to_token(int(hf_id))

    def pieces(self, text: str) -> list[str]:
        return [self._pieces[i] for i in self.encode(text)]

    @functools.cached_property
    def control_ids(self) -> tuple[int, ...]:
        """The ids whose text holds a control character (`is_control`), ascending: GPT-2's "Ċ" (a newline)."""
        hf = self.rows[len(SPECIALS):]
        texts = self._tok.decode_batch([[h] if h >= 0 else [] for h in hf], skip_special_tokens=False)
        return tuple(i for i, t in enumerate(texts, len(SPECIALS)) if is_control(t))

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": self.kind, "tokenizer": self.tokenizer_json, "rows": self.rows,
                           "specials": self.specials}, ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ImportedTokenizer:
        obj = json.loads(data.decode("utf-8"))
        if not isinstance(obj, dict) or obj.get("kind") != cls.kind or not isinstance(obj.get("tokenizer"), str):
            raise AttnlabError("not an imported Hugging Face tokenizer (expected {'kind': 'huggingface', ...})")
        return cls(obj["tokenizer"], obj["rows"], obj["specials"])


def _has_type(node, name: str) -> bool:
    """Whether a tokenizer.json component (a decoder, possibly a Sequence of them) is or holds type `name`."""
    if isinstance(node, dict):
        return node.get("type") == name or any(_has_type(v, name) for v in node.values())
    if isinstance(node, list):
        return any(_has_type(v, name) for v in node)
    return False


Tokenizer = CharTokenizer | SentencePieceTokenizer | MarianVocabTokenizer | ImportedTokenizer


@dataclass
class TokenizerPair:
    """Source and target tokenizers; joint: one shared tokenizer (the same object on both sides)."""

    src: Tokenizer
    tgt: Tokenizer
    joint: bool
    config: TokenizerConfig = field(default_factory=TokenizerConfig)

    def __post_init__(self) -> None:
        if self.joint and self.src is not self.tgt:
            raise AttnlabError("a joint TokenizerPair needs the same tokenizer on both sides")


def train_tokenizer(cfg: TokenizerConfig, texts: Sequence[str]) -> Tokenizer:
    """One tokenizer of cfg.kind trained on texts (cfg.joint is not used)."""
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    if cfg.kind in ("marian", "huggingface"):
        raise AttnlabError(f"tokenizer.kind = {cfg.kind!r} is an imported model's tokenizer (attnlab import); it "
                           "cannot be trained: choose 'unigram', 'bpe' or 'char'")
    return SentencePieceTokenizer.train(texts, cfg)


def build_tokenizers(cfg: TokenizerConfig, train_src: Sequence[str], train_tgt: Sequence[str]) -> TokenizerPair:
    """Trains the tokenizers on the TRAIN split only (dev/test text must not shape the vocabulary).
    cfg.joint: one tokenizer trained on source + target; else one per side."""
    if cfg.joint:
        tok = train_tokenizer(cfg, [*train_src, *train_tgt])
        return TokenizerPair(tok, tok, joint=True, config=cfg)
    return TokenizerPair(train_tokenizer(cfg, train_src), train_tokenizer(cfg, train_tgt), joint=False, config=cfg)


def _file_name(side: str, kind: str) -> str:
    return {"char": f"{side}.chars.json", "marian": f"{side}.marian.json",
            "huggingface": f"{side}.huggingface.json"}.get(kind, f"{side}.model")


def save_tokenizers(pair: TokenizerPair, directory: Path | str) -> None:
    """Writes directory/tokenizer.json (kind, joint, config) and the src/tgt model files (src.model,
    tgt.model or src.chars.json, tgt.chars.json). tokenizer.json is written last, so its presence means the
    directory is complete."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise AttnlabError(f"{directory}: a file of that name exists; the tokenizer is saved to a folder")
    kind = pair.src.kind
    for side in ("src", "tgt"):
        atomic_write_bytes(directory / _file_name(side, kind), getattr(pair, side).to_bytes())
    meta = {"format": FORMAT_VERSION, "kind": kind, "joint": pair.joint, "config": asdict(pair.config)}
    atomic_write_bytes(directory / "tokenizer.json", (json.dumps(meta, indent=2) + "\n").encode())


def load_tokenizers(directory: Path | str) -> TokenizerPair:
    """The TokenizerPair saved by save_tokenizers; a missing or corrupt directory raises AttnlabError."""
    directory = Path(directory)
    meta_path = directory / "tokenizer.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        kind, joint, cfg = meta["kind"], bool(meta["joint"]), from_dict(TokenizerConfig, meta["config"])
    except FileNotFoundError:
        raise AttnlabError(f"no saved tokenizer in {directory}: {meta_path} not found") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AttnlabError(f"corrupt tokenizer file {meta_path}: {e}") from None
    if meta.get("format") != FORMAT_VERSION or kind not in TokenizerConfig.CHOICES["kind"]:
        raise AttnlabError(f"{meta_path}: unsupported format {meta.get('format')!r} or kind {kind!r}")

    def load(side: str) -> Tokenizer:
        path = directory / _file_name(side, kind)
        try:
            data = path.read_bytes()
            if kind == "char":
                return CharTokenizer.from_bytes(data)
            if kind == "marian":
                return MarianVocabTokenizer.from_bytes(data)
            if kind == "huggingface":
                return ImportedTokenizer.from_bytes(data)
            return SentencePieceTokenizer.from_bytes(data, kind)
        except (OSError, ValueError, IndexError, RuntimeError) as e:
            # AttnlabError, JSON and UTF-8 errors are ValueErrors; SentencePiece raises the other two
            raise AttnlabError(f"cannot load tokenizer {path}: {e}") from None

    if joint:
        tok = load("src")
        return TokenizerPair(tok, tok, joint=True, config=cfg)
    return TokenizerPair(load("src"), load("tgt"), joint=False, config=cfg)


def cached_tokenizers(corpus, kind: str, vocab_size: int, joint: bool) -> TokenizerPair:
    """Tokenizers trained on a corpus's train split (`attnlab.data.corpus.Corpus`), cached by corpus name and settings
    (the Bible corpus is fixed, so its tokenizer can be reused; file corpora are retrained every time)."""
    import time

    cfg = TokenizerConfig(kind=kind, vocab_size=vocab_size, joint=joint)
    cacheable = corpus.name.startswith("bible-")
    where = cache_dir() / "tokenizers" / f"{corpus.name}-{kind}-{vocab_size}-{'joint' if joint else 'sep'}"
    if cacheable and (where / "tokenizer.json").is_file():
        return load_tokenizers(where)
    t0 = time.perf_counter()
    log.info("training a %s tokenizer on %s train pairs ...", kind, f"{len(corpus.train):,}")
    pair = build_tokenizers(cfg, [p.src for p in corpus.train], [p.tgt for p in corpus.train])
    log.info("  done in %.1f s", time.perf_counter() - t0)
    if cacheable:
        save_tokenizers(pair, where)
    return pair
