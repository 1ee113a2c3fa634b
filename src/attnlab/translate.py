"""Translating text with a trained run: tokenize, batch, search (greedy or beam), detokenize, and keep the
attention weights and token labels for plotting."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from attnlab.batching import pad_sequences
from attnlab.errors import AttnlabError
from attnlab.search import beam_search, greedy_search, max_output_length
from attnlab.tokenizers import EOS_ID, TokenizerPair

if TYPE_CHECKING:
    from attnlab.experiment import DecodeConfig


@dataclass
class Translation:
    text: str  # detokenized output
    score: float  # the search's (length-penalised) score
    src_tokens: list[str]  # source pieces incl. the final </s> (the attention's columns)
    tgt_tokens: list[str]  # output pieces, + </s> if the search finished it (the attention's rows)
    attention: torch.Tensor | None  # (len(tgt_tokens), ..., len(src_tokens)) when requested


class Translator:
    """A model and its tokenizers, ready to translate batches of sentences."""

    def __init__(self, model: nn.Module, tokenizers: TokenizerPair, decode: DecodeConfig,
                 device: torch.device | str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.tokenizers, self.decode, self.device = tokenizers, decode, torch.device(device)

    @classmethod
    def from_run(cls, run_dir: Path | str, checkpoint: str = "best", device: str = "cpu") -> Translator:
        """The translator of a trained translation run (RNN or Transformer), best or last weights."""
        from attnlab.workflow import load_run  # the run pipeline builds on this module

        run = load_run(run_dir, checkpoint, device, ability="translate")
        return cls(run.model, run.tokenizers, run.cfg.decode, run.device)

    def encode_source(self, sentences: list[str]) -> list[list[int]]:
        ids = [self.tokenizers.src.encode(s) + [EOS_ID] for s in sentences]
        for i, x in enumerate(ids):
            if len(x) > self.decode.max_src_tokens:
                raise AttnlabError(f"sentence {i + 1} has {len(x)} tokens; the limit is "
                                   f"{self.decode.max_src_tokens} (decode.max_src_tokens)")
        return ids

    @torch.no_grad()
    def translate(self, sentences: list[str], beam_size: int | None = None, n_best: int = 1,
                  need_weights: bool = False) -> list[list[Translation]]:
        """n_best translations per sentence, in input order. beam_size 1 is greedy search."""
        beam = self.decode.beam_size if beam_size is None else beam_size
        if beam < 1 or n_best < 1 or n_best > beam:
            raise AttnlabError(f"need 1 <= n_best ({n_best}) <= beam size ({beam})")
        ids = self.encode_source(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[list[Translation]] = [[] for _ in ids]
        for start in range(0, len(order), self.decode.batch_size):
            chunk = order[start:start + self.decode.batch_size]
            src = pad_sequences([ids[i] for i in chunk]).to(self.device)  # (B, S)
            lengths = torch.tensor([len(ids[i]) for i in chunk], device=self.device)  # (B,)
            limit = max_output_length(lengths, self.decode.max_len_ratio, self.decode.max_len_offset)
            if beam == 1:
                hyps = greedy_search(self.model, src, lengths, limit, need_weights=need_weights)
            else:
                hyps = beam_search(self.model, src, lengths, beam, limit, self.decode.length_penalty, n_best,
                                   need_weights=need_weights)
            for i, nbest in zip(chunk, hyps):
                results[i] = [self._translation(ids[i], h) for h in nbest]
        return results

    def _translation(self, src_ids: list[int], hyp) -> Translation:
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        attention = None
        if hyp.attention is not None:
            attention = hyp.attention[..., : len(src_ids)].float().cpu()
        return Translation(text=tgt_tok.decode(hyp.tokens), score=hyp.score,
                           src_tokens=[src_tok.id_to_piece(i) for i in src_ids],
                           tgt_tokens=[tgt_tok.id_to_piece(i) for i in hyp.tokens] + (["</s>"] if hyp.finished else []),
                           attention=attention)
