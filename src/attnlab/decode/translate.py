"""Translating text with a trained run: tokenize, batch, search (greedy or beam), detokenize, and keep the
attention weights and token labels for plotting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from attnlab.core.config import MAX_BEAM, MAX_LEN
from attnlab.core.devices import amp_dtype, autocast
from attnlab.core.errors import AttnlabError
from attnlab.data.batching import grid_length, pad_sequences
from attnlab.data.tokenizers import EOS_ID, Tokenizer, TokenizerPair
from attnlab.decode.search import TraceStep, beam_search, greedy_search, max_output_length, output_cap
from attnlab.kernels.memory import keep_freed_memory


def output_text(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of generated target ids, as every output shows it (translations, n-best lists, beam trees): the
    tokenizer's decode without surrounding spaces. An output cut at the length limit can end in a lone word-start
    piece, which decodes as a trailing space; Marian's and Hugging Face's tokenizers strip it too."""
    return tokenizer.decode(ids).strip(" ")


@dataclass
class DecodeConfig:
    """How a run decodes (the [decode] section of a translation config)."""

    beam_size: int = 5
    length_penalty: float = 0.6  # GNMT alpha; 0 = none
    max_len_ratio: float = 1.5  # output length limit: ratio * source tokens + offset
    max_len_offset: int = 10
    batch_size: int = 0  # sentences per decoding batch; 0: by device (`DECODE_BATCH`)
    max_src_tokens: int = 400  # longer inputs are refused with a clear error
    amp: str = "none"  # none | auto (bf16 where the device computes it natively) | bf16: autocast of the search
    length_multiple: int = 0  # sources padded to a multiple of it (a grid of shapes, as in training); 0: off

    CHOICES: ClassVar[dict] = {"amp": ("none", "auto", "bf16")}

    LIMITS: ClassVar[dict] = {"beam_size": (1, MAX_BEAM), "length_penalty": (0.0, 100.0), "max_len_ratio": (0.0, 100.0),
                              "max_len_offset": (0, MAX_LEN), "batch_size": (0, 2**16), "max_src_tokens": (1, MAX_LEN),
                              "length_multiple": (0, 4096)}

    def __post_init__(self) -> None:
        for name in ("beam_size", "max_src_tokens"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size < 0:
            raise AttnlabError(f"batch_size must be >= 0 (0: by device), got {self.batch_size}")
        if self.length_penalty < 0 or self.max_len_ratio <= 0 or self.max_len_offset < 0:
            raise AttnlabError(f"need length_penalty >= 0 (got {self.length_penalty}), max_len_ratio > 0 (got "
                               f"{self.max_len_ratio}) and max_len_offset >= 0 (got {self.max_len_offset})")


# Sentences per search batch when decode.batch_size is 0, by device type. A GPU's search step costs about the same for
# 64 sentences as for 1,024, so the split's time is the number of batches times their steps (benchmarks/decode_batch.py,
# docs/results.md "GPU"); a CPU's step grows with the batch, and a smaller one pads less.
DECODE_BATCH = {"cpu": 64, "cuda": 1024}


def batch_size_for(decode: DecodeConfig, device: torch.device) -> int:
    """decode.batch_size, or the device's own (`DECODE_BATCH`, 64 elsewhere) when it is 0."""
    return decode.batch_size or DECODE_BATCH.get(device.type, 64)


def encode_source(tokenizers: TokenizerPair, decode: DecodeConfig, sentences: list[str]) -> list[list[int]]:
    """Source ids of each sentence with EOS appended (JoeyNMT's convention); more than decode.max_src_tokens is an
    AttnlabError naming the sentence."""
    ids = [tokenizers.src.encode(s) + [EOS_ID] for s in sentences]
    for i, x in enumerate(ids):
        if len(x) > decode.max_src_tokens:
            raise AttnlabError(f"sentence {i + 1} has {len(x)} tokens; the limit is {decode.max_src_tokens} "
                               "(decode.max_src_tokens)")
    return ids


@dataclass
class Translation:
    text: str  # detokenized output
    score: float  # the search's (length-penalised) score
    src_tokens: list[str]  # source pieces incl. the final </s> (the attention's columns)
    tgt_tokens: list[str]  # output pieces, + </s> if the search finished it (the attention's rows)
    attention: torch.Tensor | None  # (len(tgt_tokens), ..., len(src_tokens)) when requested
    trace: list[TraceStep] | None = None  # beam search's record of the sentence's steps (shared by its n-best)


class Translator:
    """A model and its tokenizers, ready to translate batches of sentences."""

    def __init__(self, model: nn.Module, tokenizers: TokenizerPair, decode: DecodeConfig,
                 device: torch.device | str = "cpu") -> None:
        """A trained run's translator: `Translator(run.model, run.tokenizers, run.cfg.decode, run.device)` for a
        `attnlab.families.base.LoadedRun`, or `attnlab.load(run_dir).translator`."""
        self.model = model.to(device).eval()
        self.tokenizers, self.decode, self.device = tokenizers, decode, torch.device(device)
        self.amp_dtype = amp_dtype(decode.amp, self.device, key="decode.amp")  # None: fp32
        self.batch_size = batch_size_for(decode, self.device)
        if self.device.type == "cpu":  # a beam's caches, reordered every step, reuse freed memory (kernels.memory)
            keep_freed_memory()

    def encode_source(self, sentences: list[str]) -> list[list[int]]:
        return encode_source(self.tokenizers, self.decode, sentences)

    @torch.no_grad()
    def translate(self, sentences: list[str], beam_size: int | None = None, n_best: int = 1,
                  need_weights: bool = False, trace: bool = False) -> list[list[Translation]]:
        """n_best translations per sentence, in input order. beam_size 1 is greedy search. trace: each
        translation carries beam search's record of its sentence (`attnlab.decode.search.TraceStep`; greedy: None)."""
        beam = self.decode.beam_size if beam_size is None else beam_size
        if beam < 1 or n_best < 1 or n_best > beam:
            raise AttnlabError(f"need 1 <= n_best ({n_best}) <= beam size ({beam})")
        ids = self.encode_source(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[list[Translation]] = [[] for _ in ids]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            grid = self.decode.length_multiple  # padding is masked: the outputs are those of the unpadded batch
            longest = max(len(ids[i]) for i in chunk)
            src = pad_sequences([ids[i] for i in chunk], length=int(grid_length(longest, grid)) if grid else 0
                                ).to(self.device)  # (B, S)
            lengths = torch.tensor([len(ids[i]) for i in chunk], device=self.device)  # (B,)
            limit = max_output_length(lengths, self.decode.max_len_ratio, self.decode.max_len_offset,
                                      output_cap(self.model))
            traces: list[list[TraceStep]] | None = [] if trace and beam > 1 else None
            with autocast(self.amp_dtype, self.device):  # decode.amp; the log-probs are float32 either way
                if beam == 1:
                    hyps = greedy_search(self.model, src, lengths, limit, need_weights=need_weights,
                                         banned=self.tokenizers.tgt.control_ids)
                else:
                    hyps = beam_search(self.model, src, lengths, beam, limit, self.decode.length_penalty, n_best,
                                       need_weights=need_weights, trace=traces, banned=self.tokenizers.tgt.control_ids)
            for b, (i, nbest) in enumerate(zip(chunk, hyps)):
                results[i] = [self._translation(ids[i], h, None if traces is None else traces[b]) for h in nbest]
        return results

    def _translation(self, src_ids: list[int], hyp, trace: list[TraceStep] | None = None) -> Translation:
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        attention = None
        if hyp.attention is not None:
            attention = hyp.attention[..., : len(src_ids)].float().cpu()
        return Translation(text=output_text(tgt_tok, hyp.tokens), score=hyp.score,
                           src_tokens=[src_tok.id_to_piece(i) for i in src_ids],
                           tgt_tokens=[tgt_tok.id_to_piece(i) for i in hyp.tokens] + (["</s>"] if hyp.finished else []),
                           attention=attention, trace=trace)


class CTranslate2Translator:
    """The same interface as `Translator` (`translate(sentences, beam_size, n_best)`), decoding with a CTranslate2
    export of the run (`attnlab.interop.ctranslate2`) and the run's tokenizers: no PyTorch in the search.

    Search settings are the run's decode section: beam size, the per-sentence limit floor(ratio x source tokens) +
    offset (CTranslate2 takes one limit per batch: the batch's largest is given, and longer outputs are cut to
    their own limit, which for greedy search is exactly attnlab's result), the length penalty as CTranslate2's
    length^alpha (attnlab's is GNMT's ((5 + length) / 6)^alpha, so beam outputs may differ slightly).
    need_weights: the cross-attention of the last decoder layer averaged over its heads (how `interop.ctranslate2`
    configures the model's alignment), (T, S) per translation.
    """

    def __init__(self, model_dir: Path | str, tokenizers: TokenizerPair, decode: DecodeConfig, threads: int = 0
                 ) -> None:
        try:
            import ctranslate2  # the optional extra 'ctranslate2'
        except ImportError:
            raise AttnlabError("--engine ctranslate2 needs attnlab's optional extra 'ctranslate2': pip install "
                               "'attnlab[ctranslate2]'") from None
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "model.bin").is_file():
            raise AttnlabError(f"{self.model_dir}: not a CTranslate2 model directory (model.bin missing); create it "
                               "with attnlab export RUN_DIR --to ctranslate2")
        try:
            self.ct2 = ctranslate2.Translator(str(self.model_dir), device="cpu", inter_threads=1,
                                              intra_threads=threads or torch.get_num_threads())
        except Exception as e:  # a damaged model.bin: RuntimeError, ValueError, IndexError ... of CTranslate2
            lines = str(e).strip().splitlines() or [type(e).__name__]
            raise AttnlabError(f"{self.model_dir / 'model.bin'}: CTranslate2 cannot load it ({lines[0][:200]}); "
                               "export the run again") from None
        self.tokenizers, self.decode = tokenizers, decode
        tgt = tokenizers.tgt
        self.tgt_ids = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}

    def encode_source(self, sentences: list[str]) -> list[list[int]]:
        return encode_source(self.tokenizers, self.decode, sentences)

    def translate(self, sentences: list[str], beam_size: int | None = None, n_best: int = 1,
                  need_weights: bool = False) -> list[list[Translation]]:
        beam = self.decode.beam_size if beam_size is None else beam_size
        if beam < 1 or n_best < 1 or n_best > beam:
            raise AttnlabError(f"need 1 <= n_best ({n_best}) <= beam size ({beam})")
        src_tok = self.tokenizers.src
        ids = encode_source(self.tokenizers, self.decode, sentences)  # EOS and the length check
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[list[Translation]] = [[] for _ in ids]
        batch_size = batch_size_for(self.decode, torch.device("cpu"))
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            pieces = [[src_tok.id_to_piece(t) for t in ids[i]] for i in chunk]
            limits = max_output_length(torch.tensor([len(ids[i]) for i in chunk]), self.decode.max_len_ratio,
                                       self.decode.max_len_offset).tolist()
            # the torch engine's banned pieces (`search.banned_ids`: the target's control pieces, which decode to a
            # newline or another control character) suppressed here too, so both engines write one line per input
            suppressed = [[self.tokenizers.tgt.id_to_piece(i)] for i in self.tokenizers.tgt.control_ids]
            out = self.ct2.translate_batch(pieces, beam_size=beam, num_hypotheses=n_best,
                                           length_penalty=self.decode.length_penalty,
                                           max_decoding_length=max(limits), return_scores=True,
                                           return_attention=need_weights, suppress_sequences=suppressed or None)
            for i, limit, src_pieces, res in zip(chunk, limits, pieces, out):
                attentions = res.attention if need_weights else [None] * len(res.hypotheses)
                results[i] = [self._translation(src_pieces, tokens, score, limit, att)
                              for tokens, score, att in zip(res.hypotheses, res.scores, attentions)]
        return results

    def _translation(self, src_pieces: list[str], tokens: list[str], score: float, limit: int,
                     attention: list | None) -> Translation:
        finished = len(tokens) + 1 <= limit  # the EOS fits in the sentence's own limit
        tokens = tokens if finished else tokens[:limit]
        tgt_tokens = tokens + (["</s>"] if finished else [])
        weights = None
        if attention is not None:  # a row per generated token; the EOS step's row may be missing
            rows = torch.tensor(attention, dtype=torch.float32)[: len(tgt_tokens)]  # (T, S)
            if 0 < rows.size(0) < len(tgt_tokens):
                rows = torch.cat([rows, rows[-1:].expand(len(tgt_tokens) - rows.size(0), -1)])
            weights = rows
        unknown = [t for t in tokens if t not in self.tgt_ids]
        if unknown:  # not the run tokenizer's vocabulary (`check_export` catches it first)
            raise AttnlabError(f"{self.model_dir}: the model produced {unknown[0]!r}, which the run's target "
                               "tokenizer does not have")
        tgt_ids = [self.tgt_ids[t] for t in tokens]
        return Translation(text=output_text(self.tokenizers.tgt, tgt_ids), score=float(score), src_tokens=src_pieces,
                           tgt_tokens=tgt_tokens, attention=weights)
