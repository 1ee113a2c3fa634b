"""attnlab.decode.translate: decode.amp, the precision of the search (issue 23): bf16 autocast runs the model's matrix
products in bf16, fp32 stays fp32, "auto" follows the CPU's flags, and a bad choice is refused naming the key."""

from __future__ import annotations

import pytest
import torch

from attnlab.core import devices
from attnlab.core.errors import AttnlabError
from attnlab.families.translation import experiment_from_dict
from attnlab.data.tokenizers import CharTokenizer, TokenizerPair
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.decode.translate import DecodeConfig, Translator

CHARS = "abcdefghijklmnopqrstuvwxyz "


def translator(amp: str) -> Translator:
    torch.manual_seed(0)
    tok = CharTokenizer(CHARS)
    model = TransformerSeq2Seq(tok.vocab_size, tok.vocab_size,
                               TransformerConfig(d_model=16, h=4, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0))
    return Translator(model, TokenizerPair(tok, tok, joint=True), DecodeConfig(beam_size=2, amp=amp))


def linear_input_dtypes(t: Translator, beam: int) -> set[torch.dtype]:
    """The dtypes the generator (output layer) computes in during a search."""
    seen: set[torch.dtype] = set()
    hook = t.model.generator.register_forward_hook(lambda m, args, out: seen.add(out.dtype))
    try:
        out = t.translate(["the cat", "a door"], beam_size=beam)
    finally:
        hook.remove()
    assert len(out) == 2 and all(isinstance(n[0].score, float) for n in out)
    return seen


@pytest.mark.parametrize("beam", [1, 2])
def test_decode_amp_bf16_runs_the_search_in_bf16(beam):
    assert linear_input_dtypes(translator("bf16"), beam) == {torch.bfloat16}
    assert linear_input_dtypes(translator("none"), beam) == {torch.float32}


def test_decode_amp_auto_follows_the_cpus_flags(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512f", "avx2"})  # no native bf16
    assert linear_input_dtypes(translator("auto"), 1) == {torch.float32}
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert linear_input_dtypes(translator("auto"), 1) == {torch.bfloat16}


def test_a_bad_decode_amp_is_refused_naming_the_key():
    with pytest.raises(AttnlabError, match=r"decode\.amp"):
        experiment_from_dict({"data": {"corpus": "bible"}, "decode": {"amp": "fp16"}})
