"""Export a trained Transformer run to CTranslate2 (the inference engine OpenNMT, fairseq and Marian models are
deployed with), built with the `ctranslate2` package's own model specs from attnlab's weights.

The result is a standard CTranslate2 model directory (model.bin, config.json, vocabularies) that
`ctranslate2.Translator` (a translation run) or `ctranslate2.Generator` (a decoder-only LM run) loads without
attnlab, plus the run's tokenizer files under tokenizer/ (SentencePiece models `src.model`, `tgt.model`);
`attnlab translate --engine ctranslate2` uses it with the run's tokenizer. What maps onto what:

- embeddings: the embedding matrices, multiplied by sqrt(d_model) at run time (`scale_embeddings`, Vaswani 3.4);
- positions: attnlab's own table (sinusoidal or learned) written into the spec, so both engines add the same
  vectors whatever CTranslate2's default layout;
- each layer: self-attention with Q, K, V packed into one matrix, cross-attention with K, V packed, the FFN, and
  their LayerNorms, pre- or post-norm (`pre_norm`), ReLU or exact GELU, LayerNorm epsilon as configured;
- the output layer (tied or not: the weights are copied), the final LayerNorms of pre-norm stacks.

The source gets attnlab's EOS appended by the caller (as `Translator.encode_source` does), decoding starts from
<s>. RNN runs are refused: CTranslate2 has no RNN models.

Shape legend: D d_model, V vocabulary, N layers.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.fileio import atomic_write_bytes, make_dirs, write_json
from attnlab.runs import LoadedRun
from attnlab.tokenizers import SPECIALS

log = logging.getLogger("attnlab")

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16",
                 "int8_bfloat16")


def _ct2():
    try:
        import ctranslate2  # the optional extra 'ctranslate2'
    except ImportError:
        raise AttnlabError("exporting to CTranslate2 needs attnlab's optional extra 'ctranslate2': pip install "
                           "'attnlab[ctranslate2]'") from None
    return ctranslate2


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _linear(spec, linear: torch.nn.Linear | None = None, weight: torch.Tensor | None = None,
            bias: torch.Tensor | None = None) -> None:
    spec.weight = _np(linear.weight if weight is None else weight)
    b = linear.bias if (linear is not None and bias is None) else bias
    if b is not None:
        spec.bias = _np(b)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias) if norm.bias is not None else np.zeros(norm.weight.shape, dtype=np.float32)


def _self_attention(spec, mha, norm) -> None:
    """Q, K, V packed into linear[0] (3D x D), W^O into linear[1]."""
    _linear(spec.linear[0], weight=torch.cat([mha.W_Q.weight, mha.W_K.weight, mha.W_V.weight]),
            bias=None if mha.W_Q.bias is None else torch.cat([mha.W_Q.bias, mha.W_K.bias, mha.W_V.bias]))
    _linear(spec.linear[1], mha.W_O)
    _norm(spec.layer_norm, norm)


def _cross_attention(spec, mha, norm) -> None:
    """Q into linear[0], K and V packed into linear[1] (2D x D), W^O into linear[2]."""
    _linear(spec.linear[0], mha.W_Q)
    _linear(spec.linear[1], weight=torch.cat([mha.W_K.weight, mha.W_V.weight]),
            bias=None if mha.W_K.bias is None else torch.cat([mha.W_K.bias, mha.W_V.bias]))
    _linear(spec.linear[2], mha.W_O)
    _norm(spec.layer_norm, norm)


def _ffn(spec, ff, norm) -> None:
    _linear(spec.linear_0, ff.linear1)
    _linear(spec.linear_1, ff.linear2)
    _norm(spec.layer_norm, norm)


def _output(spec, decoder_spec, generator: torch.nn.Linear, layer_norm_eps: float) -> None:
    """The output layer (a zero bias where attnlab has none), LayerNorm epsilon and attnlab's special tokens."""
    _linear(decoder_spec.projection, generator)
    if generator.bias is None:
        decoder_spec.projection.bias = np.zeros(generator.out_features, dtype=np.float32)
    spec.config.layer_norm_epsilon = layer_norm_eps
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = SPECIALS[3], SPECIALS[1], SPECIALS[2]


def _positions(pos) -> np.ndarray:
    return _np(pos.learned.weight if pos.learned is not None else pos.pe)  # (max_len, D)


def transformer_spec(model, src_vocab: list[str], tgt_vocab: list[str]):
    """The `ctranslate2.specs.TransformerSpec` holding the weights of an attnlab `TransformerSeq2Seq`."""
    ct2 = _ct2()
    specs = ct2.specs
    cfg = model.cfg
    activation = specs.Activation.GELU if cfg.activation == "gelu" else specs.Activation.RELU
    # the attention it returns: the last decoder layer's cross-attention, averaged over all heads
    spec = specs.TransformerSpec.from_config((cfg.enc_layers, cfg.dec_layers), cfg.h, pre_norm=cfg.norm == "pre",
                                             activation=activation, alignment_layer=-1, alignment_heads=0)
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    enc.scale_embeddings = dec.scale_embeddings = True  # sqrt(D) * E[tokens]
    enc.position_encodings.encodings = _positions(model.src_pos)
    dec.position_encodings.encodings = _positions(model.tgt_pos)
    if cfg.norm == "pre":
        _norm(enc.layer_norm, model.enc_norm)
        _norm(dec.layer_norm, model.dec_norm)
    for layer_spec, layer in zip(enc.layer, model.encoder):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.norm1)
        _ffn(layer_spec.ffn, layer.ff, layer.norm2)
    for layer_spec, layer in zip(dec.layer, model.decoder):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.norm1)
        _cross_attention(layer_spec.attention, layer.cross_attn, layer.norm2)
        _ffn(layer_spec.ffn, layer.ff, layer.ff_norm)
    _output(spec, dec, model.generator, cfg.layer_norm_eps)
    spec.config.decoder_start_token = SPECIALS[1]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    return spec


def language_model_spec(model, vocab: list[str]):
    """The `ctranslate2.specs.TransformerDecoderModelSpec` (for `ctranslate2.Generator`) holding the weights of an
    attnlab `TransformerLM`: the decoder layers without cross-attention, norm1 before self-attention and norm2
    before the FFN."""
    ct2 = _ct2()
    specs = ct2.specs
    cfg = model.cfg
    activation = specs.Activation.GELU if cfg.activation == "gelu" else specs.Activation.RELU
    spec = specs.TransformerDecoderModelSpec.from_config(cfg.layers, cfg.h, pre_norm=cfg.norm == "pre",
                                                         activation=activation)
    dec = spec.decoder
    dec.embeddings.weight = _np(model.embed.weight)
    dec.scale_embeddings = True
    dec.position_encodings.encodings = _positions(model.pos)
    if cfg.norm == "pre":
        _norm(dec.layer_norm, model.norm)
    for layer_spec, layer in zip(dec.layer, model.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.norm1)
        _ffn(layer_spec.ffn, layer.ff, layer.ff_norm)
    _output(spec, dec, model.generator, cfg.layer_norm_eps)
    spec.register_vocabulary(vocab)
    return spec


def vocabulary(tokenizer) -> list[str]:
    """Every id's piece, in id order (the specials first), with a unique string per id as CTranslate2 needs."""
    pieces = [SPECIALS[i] if i < len(SPECIALS) else tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if p in seen:
            raise AttnlabError(f"the tokenizer has the piece {p!r} twice (ids {seen[p]} and {i}); CTranslate2 "
                               "looks tokens up by string")
        seen[p] = i
    return pieces


def ctranslate2_dir(run_dir: Path | str, checkpoint: str = "best", quantization: str = "float32") -> Path:
    """Where a run's CTranslate2 export goes by default: RUN_DIR/ctranslate2-<checkpoint>-<quantization>."""
    return Path(run_dir) / f"ctranslate2-{checkpoint}-{quantization}"


def export_ctranslate2(run: LoadedRun, out: Path | str | None = None, quantization: str = "float32") -> Path:
    """Writes the CTranslate2 model of a loaded Transformer translation run (for `ctranslate2.Translator`) or
    language-model run (for `ctranslate2.Generator`) to `out` (default `ctranslate2_dir`); returns the directory.
    The weights are quantized as asked (int8: 8-bit weights, float32 compute). `attnlab.workflow.export_run`
    loads the run and calls this."""
    ct2 = _ct2()
    run_dir = run.run_dir
    if quantization not in QUANTIZATIONS:
        raise AttnlabError(f"--quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    if run.family.name not in ("transformer", "lm"):
        raise AttnlabError(f"{run_dir}: a {run.family.title} run cannot be exported to CTranslate2, which has no "
                           "RNN models; Transformer translation and language-model runs can")
    out = Path(out) if out is not None else ctranslate2_dir(run_dir, run.checkpoint, quantization)
    if run.family.name == "lm":
        spec = language_model_spec(run.model, vocabulary(run.tokenizers.tgt))
    else:
        spec = transformer_spec(run.model, vocabulary(run.tokenizers.src), vocabulary(run.tokenizers.tgt))
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    make_dirs(out)
    spec.save(str(out))
    for f in sorted((run_dir / "tokenizer").iterdir()):  # the SentencePiece models, to tokenize without attnlab
        if f.is_file():
            atomic_write_bytes(out / "tokenizer" / f.name, f.read_bytes())
    write_json(out / "attnlab.json", {"run": str(run_dir.resolve()), "checkpoint": run.checkpoint,
                                      "quantization": quantization, "ctranslate2": ct2.__version__,
                                      "family": run.family.name, "max_len": run.model.cfg.max_len})
    log.info("exported %s (%s) to %s", run_dir, quantization, out)
    return out
