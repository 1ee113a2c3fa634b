"""Encoder-decoders in and out of Hugging Face (`attnlab.interop.huggingface` calls it): a Transformer
translation run exported as a folder that `AutoModelForSeq2SeqLM.from_pretrained` and
`AutoTokenizer.from_pretrained` load with no attnlab and no custom code, and a MarianMT folder (the OPUS-MT models)
imported as an ordinary attnlab run. Written and read with safetensors and JSON only (`attnlab.interop.hf_folder`).

Which class a run of the "seq2seq" kind (its family row's `hf_kind`, `attnlab.families.base.Family`) becomes:
post-norm -> `MarianMTModel` (sinusoidal positions, scaled embeddings, the three tie settings, separate vocabularies),
pre-norm -> `PegasusForConditionalGeneration` (pre-norm layers and a final LayerNorm after each stack, one shared
embedding). M2M100 is not used: its sinusoid has other frequencies and counts positions from the padding. A
setting neither class expresses is refused with one line naming it (`refusal`).

The sinusoids differ in layout only: attnlab interleaves them (pe[:, 2i] = sin, pe[:, 2i+1] = cos), Marian and
Pegasus put [sin | cos] with the same frequencies. The export permutes every d_model axis of every tensor with
`hidden_permutation` (LayerNorm commutes with it, attention heads and the FFN's inner axis are untouched), so the
Hugging Face model computes the same function exactly; the import applies the inverse. Gathers are exact:
export -> import -> export gives the same tensors bit for bit.

Weight names (i: layer; a missing attnlab bias, `bias = false`, is written as zeros, which Marian adds exactly):

| attnlab                                  | Hugging Face (Marian; Pegasus the same)                      |
|------------------------------------------|--------------------------------------------------------------|
| tgt_embed (tie all)                      | model.shared (encoder, decoder and lm_head tied to it)       |
| src_embed, tgt_embed (tie decoder, none) | model.encoder.embed_tokens, model.decoder.embed_tokens       |
| generator.weight (tie none)              | lm_head.weight                                               |
| generator.bias (else zeros)              | final_logits_bias (1, V)                                     |
| encoder.i.self_attn.W_Q/W_K/W_V/W_O      | model.encoder.layers.i.self_attn.q_proj/k_proj/v_proj/out_proj |
| encoder.i.norm1, ff.linear1/2, norm2     | ....self_attn_layer_norm, fc1/fc2, final_layer_norm          |
| decoder.i.self_attn, norm1               | model.decoder.layers.i.self_attn, self_attn_layer_norm       |
| decoder.i.cross_attn, norm2              | ....encoder_attn, encoder_attn_layer_norm                    |
| decoder.i.ff, norm3                      | ....fc1/fc2, final_layer_norm                                |
| enc_norm, dec_norm (pre-norm)            | model.encoder.layer_norm, model.decoder.layer_norm           |
| src_pos.pe, tgt_pos.pe (pre-norm)        | model.{encoder,decoder}.embed_positions (Marian rebuilds its) |

Tokenizer: MarianTokenizer's files (source.spm, target.spm, vocab.json), which call the SentencePiece library
itself, so the pieces and ids are attnlab's exactly. An import of an OPUS-MT model reorders the vocabulary to
attnlab's special ids (PAD 0, BOS 1, EOS 2, UNK 3): the Hugging Face pad, its decoder start, becomes BOS, and PAD
is a dead extra row (zero embedding, output bias DEAD_LOGIT: probability exactly 0 in fp32).

Shape legend: D d_model, V vocabulary, F d_ff.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from attnlab.core.config import MAX_DIM, MAX_LAYERS, MAX_LEN, MAX_VOCAB
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import read_json
from attnlab.core.logs import read_metrics
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, MarianVocabTokenizer, TokenizerPair
from attnlab.families.base import LoadedRun
from attnlab.interop.hf_folder import (DEAD_LOGIT, MANIFEST, Imported, check_layers, choice, read_weights, setting,
                                      tensor)
from attnlab.nn.transformer import PositionalEncoding

HF_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, fixed in Marian's and Pegasus' layers (no config key)
EXPORT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm",
                          "vocab.json", "target_vocab.json", "tokenizer_config.json", "special_tokens_map.json",
                          "README.md", MANIFEST})
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "swish": "silu", "silu": "silu"}  # HF -> ours
TO_HF = {"silu": "swish", "gelu_tanh": "gelu_new"}  # attnlab -> Hugging Face, where the names differ
LOAD_LINES = ("from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
              "tok, model = AutoTokenizer.from_pretrained(DIR), AutoModelForSeq2SeqLM.from_pretrained(DIR)",
              "print(tok.batch_decode(model.generate(**tok([\"In the beginning\"], return_tensors=\"pt\")), "
              "skip_special_tokens=True))")


# ============================================================================================ export: tensors
def hidden_permutation(d_model: int) -> Tensor:
    """perm (D,): Hugging Face hidden dim k is attnlab's dim perm[k] = [0, 2, 4, ..., 1, 3, 5, ...]: Marian's
    [sin | cos] table (ceil(D/2) sin columns, odd D too) is attnlab's interleaved one, pe[:, perm]."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def refusal(cfg, joint_vocab: bool, tokenizer_kind: str) -> str | None:
    """The one line naming the setting of a Transformer config (`attnlab.nn.transformer.TransformerConfig`) that
    neither Marian (post-norm) nor Pegasus (pre-norm) expresses, or None."""
    if tokenizer_kind == "char":
        return ("tokenizer.kind = 'char': the exported tokenizer is MarianTokenizer, which reads SentencePiece "
                "models; train with kind = 'unigram' or 'bpe'")
    if cfg.positions == "learned":
        return ("model.transformer.positions = 'learned': MarianMT and Pegasus have sinusoidal positions only, and "
                "the classes with learned ones (BART, mBART) add a LayerNorm on the embeddings")
    if cfg.layer_norm_eps != HF_LAYER_NORM_EPS:
        return (f"model.transformer.layer_norm_eps = {cfg.layer_norm_eps}: MarianMT and Pegasus fix the LayerNorm "
                f"epsilon at {HF_LAYER_NORM_EPS}")
    if cfg.norm == "pre" and cfg.tie_embeddings != "all":
        return (f"model.transformer.tie_embeddings = {cfg.tie_embeddings!r} with norm = 'pre': the pre-norm class "
                "(Pegasus) has one embedding for encoder, decoder and output layer; use tie_embeddings = 'all'")
    if cfg.norm == "pre" and not joint_vocab:
        return "tokenizer.joint = false with norm = 'pre': Pegasus has one vocabulary for both sides"
    return None


def _linear(sd: dict, name: str, lin, perm: Tensor, in_d: bool, out_d: bool) -> None:
    """A Linear's weight (out, in) and bias (out,) under `name`, its d_model axes permuted; no bias: zeros."""
    w = lin.weight[:, perm] if in_d else lin.weight
    b = lin.bias if lin.bias is not None else torch.zeros(w.size(0), dtype=w.dtype)
    sd[f"{name}.weight"], sd[f"{name}.bias"] = (w[perm], b[perm]) if out_d else (w, b)


def _norm(sd: dict, name: str, ln, perm: Tensor) -> None:
    b = ln.bias if ln.bias is not None else torch.zeros_like(ln.weight)
    sd[f"{name}.weight"], sd[f"{name}.bias"] = ln.weight[perm], b[perm]


def _attention(sd: dict, name: str, mha, perm: Tensor) -> None:
    """q/k/v read d_model (permuted) and write heads (not); out_proj reads heads and writes d_model."""
    for ours, theirs in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj")):
        _linear(sd, f"{name}.{theirs}", getattr(mha, ours), perm, in_d=True, out_d=False)
    _linear(sd, f"{name}.out_proj", mha.W_O, perm, in_d=False, out_d=True)


def _layer(sd: dict, p: str, layer, perm: Tensor, cross: bool) -> None:
    _attention(sd, f"{p}.self_attn", layer.self_attn, perm)
    _norm(sd, f"{p}.self_attn_layer_norm", layer.norm1, perm)
    if cross:
        _attention(sd, f"{p}.encoder_attn", layer.cross_attn, perm)
        _norm(sd, f"{p}.encoder_attn_layer_norm", layer.norm2, perm)
    _linear(sd, f"{p}.fc1", layer.ff.linear1, perm, in_d=True, out_d=False)
    _linear(sd, f"{p}.fc2", layer.ff.linear2, perm, in_d=False, out_d=True)
    _norm(sd, f"{p}.final_layer_norm", layer.norm3 if cross else layer.norm2, perm)


@torch.no_grad()
def export_tensors(model, vocab_order: Tensor | None = None) -> dict[str, Tensor]:
    """The Hugging Face tensors of an attnlab Transformer encoder-decoder (Marian names; Pegasus adds the final
    LayerNorms and its position tables), float32. Tied matrices are written once, under the name Hugging Face's
    save_pretrained keeps. vocab_order (V_hf,): the attnlab id of each Hugging Face row (an imported run's; None:
    the same ids)."""
    cfg = model.cfg
    perm = hidden_permutation(cfg.d_model)
    rows = (lambda m: m) if vocab_order is None else (lambda m: m[vocab_order])
    sd: dict[str, Tensor] = {}
    if cfg.tie_embeddings == "all":
        sd["model.shared.weight"] = rows(model.tgt_embed.weight)[:, perm]
    else:
        sd["model.encoder.embed_tokens.weight"] = rows(model.src_embed.weight)[:, perm]
        sd["model.decoder.embed_tokens.weight"] = rows(model.tgt_embed.weight)[:, perm]
    if cfg.tie_embeddings == "none":
        sd["lm_head.weight"] = rows(model.generator.weight)[:, perm]
    V = model.generator.out_features if vocab_order is None else vocab_order.numel()
    bias = model.generator.bias
    sd["final_logits_bias"] = (torch.zeros(V) if bias is None else rows(bias))[None]  # (1, V)
    for i, layer in enumerate(model.encoder):
        _layer(sd, f"model.encoder.layers.{i}", layer, perm, cross=False)
    for i, layer in enumerate(model.decoder):
        _layer(sd, f"model.decoder.layers.{i}", layer, perm, cross=True)
    if cfg.norm == "pre":
        _norm(sd, "model.encoder.layer_norm", model.enc_norm, perm)
        _norm(sd, "model.decoder.layer_norm", model.dec_norm, perm)
        # Pegasus saves and loads its sinusoid tables: attnlab's own, permuted (bit for bit what attnlab adds)
        sd["model.encoder.embed_positions.weight"] = model.src_pos.pe[:, perm]
        sd["model.decoder.embed_positions.weight"] = model.tgt_pos.pe[:, perm]
    return {k: v.detach().float().cpu().contiguous().clone() for k, v in sd.items()}


# ============================================================================================ export: files
def _specials(pair: TokenizerPair) -> dict[str, int]:
    """The Hugging Face ids of pad, eos, unk and the decoder start: attnlab's own, or an import's."""
    if isinstance(pair.src, MarianVocabTokenizer):
        return pair.src.specials
    return {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID, "start": BOS_ID}


def hf_config(cfg, src_vocab: int, tgt_vocab: int, specials: dict[str, int]) -> dict:
    """config.json: MarianConfig (post-norm) or PegasusConfig (pre-norm) keys, written by hand."""
    common = {
        "d_model": cfg.d_model, "encoder_layers": cfg.enc_layers, "decoder_layers": cfg.dec_layers,
        "encoder_attention_heads": cfg.h, "decoder_attention_heads": cfg.h, "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff, "activation_function": TO_HF.get(cfg.activation, cfg.activation),
        "dropout": cfg.dropout, "attention_dropout": cfg.attn_dropout, "activation_dropout": cfg.dropout,
        "max_position_embeddings": cfg.max_len, "scale_embedding": True, "is_encoder_decoder": True,
        "pad_token_id": specials["pad"], "bos_token_id": specials.get("bos"), "eos_token_id": specials["eos"],
        "decoder_start_token_id": specials["start"], "forced_eos_token_id": None, "use_cache": True,
        "dtype": "float32", "tie_word_embeddings": cfg.tie_embeddings != "none"}
    if cfg.norm == "pre":
        # normalize_before / normalize_embedding: not PegasusConfig keys (transformers keeps them as plain
        # attributes) but what CTranslate2's own converter (ct2-transformers-converter) reads for every BART-like model
        return {"architectures": ["PegasusForConditionalGeneration"], "model_type": "pegasus",
                "vocab_size": tgt_vocab, "normalize_before": True, "normalize_embedding": False, **common}
    return {"architectures": ["MarianMTModel"], "model_type": "marian", "vocab_size": src_vocab,
            "decoder_vocab_size": tgt_vocab, "share_encoder_decoder_embeddings": cfg.tie_embeddings == "all",
            **common}


def generation_config(suppress: list[int], max_length: int, specials: dict[str, int]) -> dict:
    """generation_config.json: attnlab's greedy search (its never-generated ids suppressed, no EOS forced at the
    limit; Marian's and Pegasus' defaults would force one, and stop at 20 tokens)."""
    return {"decoder_start_token_id": specials["start"], "bos_token_id": specials.get("bos"),
            "eos_token_id": specials["eos"], "pad_token_id": specials["pad"], "forced_eos_token_id": None,
            "suppress_tokens": sorted(set(suppress)), "num_beams": 1, "max_length": max_length}


def _vocab(tok) -> dict[str, int]:
    """piece -> id: attnlab's ids are the SentencePiece model's own (its four specials trained into it)."""
    vocab = {tok.id_to_piece(i): i for i in range(tok.vocab_size)}
    if len(vocab) != tok.vocab_size:
        raise AttnlabError("the tokenizer has a piece twice; MarianTokenizer looks pieces up by string")
    return vocab


def tokenizer_files(pair: TokenizerPair, max_len: int) -> dict[str, bytes]:
    """MarianTokenizer's files: source.spm, target.spm (one model twice when joint), vocab.json (and
    target_vocab.json for separate vocabularies), tokenizer_config.json."""
    dump = lambda obj: (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode()  # noqa: E731
    tok = pair.src
    if isinstance(tok, MarianVocabTokenizer):  # an import: its own files back
        files = {"source.spm": tok.source_spm, "target.spm": tok.target_spm, "vocab.json": dump(tok.vocab)}
        pieces = {name: tok.id_to_piece(i) for name, i in (("pad", BOS_ID), ("eos", EOS_ID), ("unk", UNK_ID))}
        if "bos" in tok.specials:  # the imported config's bos, back in its place
            pieces = {"pad": pieces["pad"], "bos": tok.hf_piece(tok.specials["bos"]), **pieces}
    else:
        files = {"source.spm": pair.src.to_bytes(), "target.spm": pair.tgt.to_bytes(), "vocab.json": dump(_vocab(tok))}
        if not pair.joint:
            files["target_vocab.json"] = dump(_vocab(pair.tgt))
        # the tokenizer's pad is the decoder's start, as in Marian's and Pegasus' own tokenizers (and an import's,
        # above): CTranslate2's converter starts a Pegasus decoder with it. Padding is masked, so its id is free.
        pieces = {"pad": SPECIALS[BOS_ID], "bos": SPECIALS[BOS_ID], "eos": SPECIALS[EOS_ID], "unk": SPECIALS[UNK_ID]}
    files["tokenizer_config.json"] = dump({
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": not pair.joint, "source_lang": None,
        "target_lang": None, **{f"{k}_token": v for k, v in pieces.items()}, "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True})  # "</s>" typed in a sentence is text to attnlab, not the special token
    return files


def model_card(run: LoadedRun, cls: str) -> str:
    """README.md: what the model is, its data, its training budget (RUN_DIR/metrics.jsonl), its test BLEU and
    chrF (RUN_DIR/eval/test.json, when evaluated) and the lines that load it."""
    raw = read_json(run.run_dir / "config.json")
    data = raw.get("data") if isinstance(raw, dict) and isinstance(raw.get("data"), dict) else {}
    used = ", ".join(f"{k} = {json.dumps(v)}" for k, v in data.items() if v not in ("", [], 0, None)) or "unknown"
    records = read_metrics(run.run_dir)
    steps = max((r["step"] for r in records), default=0)
    minutes = max((r.get("time_s", 0) for r in records), default=0) / 60
    cfg = run.model.cfg
    lines = [f"# {run.run_dir.name}", "",
             f"A {cfg.enc_layers}+{cfg.dec_layers}-layer {cfg.norm}-norm Transformer (d_model {cfg.d_model}, "
             f"{cfg.h} heads, d_ff {cfg.d_ff}, {cfg.activation}) trained with attnlab and exported as `{cls}` "
             f"(`attnlab export --to huggingface`, {run.checkpoint} checkpoint). The hidden dimensions are "
             "permuted so that Hugging Face's [sin | cos] positions equal attnlab's interleaved ones: the "
             "function is the same.", "", "## Data", "", used, "", "## Training budget", "",
             f"{steps:,} steps, {minutes:.1f} minutes of training." if records else "No training log (an import).",
             "", "## Test scores", ""]
    result = run.run_dir / "eval" / "test.json"
    scores = read_json(result) if result.is_file() else {}
    number = (int, float)
    if result.is_file() and not (isinstance(scores, dict) and isinstance(scores.get("bleu"), number)
                                 and not isinstance(scores["bleu"], bool)
                                 and isinstance(scores.get("chrf", 0.0), number)):
        raise AttnlabError(f"{result}: not an evaluation attnlab wrote (bleu and chrf must be numbers); evaluate "
                           "the run again")
    if scores:
        lines.append(f"BLEU {scores['bleu']:.2f}, chrF {scores.get('chrf', float('nan')):.2f} on "
                     f"{scores.get('sentences', '?')} test sentences, beam {scores.get('beam', '?')} "
                     f"({scores.get('bleu_signature', '')}).")
    else:
        lines.append("Not evaluated (run `attnlab evaluate RUN_DIR` before exporting).")
    lines += ["", "## Load it", "", "`pip install transformers sentencepiece`, then:", "", "```python",
              "DIR = \"path/to/this/folder\"", *LOAD_LINES, "```", "",
              "Greedy `generate` equals `attnlab translate --beam 1` token for token when given attnlab's length "
              "limit, `max_new_tokens = int(1.5 * source_tokens + 10)`; beam search scores length differently.", ""]
    return "\n".join(lines)


def export_seq2seq(run: LoadedRun) -> tuple[dict[str, Tensor], dict[str, bytes]]:
    """(model.safetensors' tensors, the other files) of a loaded Transformer translation run: MarianMT or Pegasus
    (`hf_config`), MarianTokenizer's files, generation_config.json and the model card. A setting neither class
    expresses is an AttnlabError (`refusal`)."""
    pair, model = run.tokenizers, run.model
    line = refusal(model.cfg, pair.joint, pair.src.kind)
    if line is not None:
        raise AttnlabError(f"{run.run_dir}: cannot export to Hugging Face: {line}")
    specials = _specials(pair)
    order = None
    if isinstance(pair.src, MarianVocabTokenizer):  # back to the Hugging Face row order, the dead PAD row dropped
        rows = torch.tensor(pair.src.rows)
        order = torch.empty(int(rows.max()) + 1, dtype=torch.long)
        order[rows[rows >= 0]] = torch.arange(len(rows))[rows >= 0]
    tensors = export_tensors(model, order)
    config = hf_config(model.cfg, pair.src.vocab_size if order is None else order.numel(),
                       pair.tgt.vocab_size if order is None else order.numel(), specials)
    banned = [PAD_ID, BOS_ID, *pair.tgt.control_ids]
    suppress = banned if order is None else [pair.src.rows[i] for i in banned if pair.src.rows[i] >= 0]
    max_length = min(model.cfg.max_len, 512)
    files = tokenizer_files(pair, model.cfg.max_len)
    files["config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    files["generation_config.json"] = (json.dumps(generation_config(suppress, max_length, specials), indent=2)
                                       + "\n").encode()
    files["README.md"] = model_card(run, config["architectures"][0]).encode()
    return tensors, files


# ============================================================================================ import (MarianMT)
def read_marian(folder: Path, hf: dict) -> tuple[dict[str, Tensor], dict[str, int]]:
    """(tensors, vocab.json) of a MarianMT folder (config.json `hf`), checked: no pickled weights
    (pytorch_model.bin is never loaded), a readable model.safetensors, a vocabulary of the config's size."""
    tensors = read_weights(folder)
    vocab = read_json(folder / "vocab.json")
    V = hf.get("vocab_size")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()) \
            or sorted(vocab.values()) != list(range(len(vocab))):
        raise AttnlabError(f"{folder / 'vocab.json'}: expected {{piece: id}} with the ids 0..n-1")
    if len(vocab) != V or hf.get("decoder_vocab_size", V) != V:
        raise AttnlabError(f"{folder / 'vocab.json'}: {len(vocab)} pieces, but config.json says vocab_size {V} "
                           f"(decoder_vocab_size {hf.get('decoder_vocab_size', V)}); the tokenizer and the model "
                           "disagree")
    return tensors, vocab


def marian_settings(hf: dict, where: Path) -> dict:
    """attnlab's model.transformer settings of a MarianConfig; a setting attnlab has not is refused, named."""
    act = choice(hf, "activation_function", "gelu", ACTIVATIONS, where)
    D = setting(hf, "d_model", where)
    sizes = {key: setting(hf, key, where, hi) for key, hi in (
        ("encoder_attention_heads", D), ("decoder_attention_heads", D), ("encoder_ffn_dim", MAX_DIM),
        ("decoder_ffn_dim", MAX_DIM), ("encoder_layers", MAX_LAYERS), ("decoder_layers", MAX_LAYERS),
        ("vocab_size", MAX_VOCAB))}
    max_len = setting(hf, "max_position_embeddings", where, MAX_LEN) if "max_position_embeddings" in hf else 1024
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if sizes[a] != sizes[b]:
            raise AttnlabError(f"{where}: {a} {hf.get(a)} != {b} {hf.get(b)}; attnlab has one h and one d_ff")
    if not hf.get("scale_embedding", False):
        raise AttnlabError(f"{where}: scale_embedding = false; attnlab always scales embeddings by sqrt(d_model)")
    if not hf.get("share_encoder_decoder_embeddings", True) or not hf.get("tie_word_embeddings", True):
        raise AttnlabError(f"{where}: separate encoder/decoder vocabularies or an untied output layer: attnlab "
                           "imports MarianMT models with one shared vocabulary (share_encoder_decoder_embeddings "
                           "and tie_word_embeddings true)")
    if D % sizes["encoder_attention_heads"]:
        raise AttnlabError(f"{where / 'config.json'}: d_model {D} is not a multiple of encoder_attention_heads "
                           f"{sizes['encoder_attention_heads']}")
    return {"d_model": D, "h": sizes["encoder_attention_heads"], "d_ff": sizes["encoder_ffn_dim"],
            "enc_layers": sizes["encoder_layers"], "dec_layers": sizes["decoder_layers"],
            "dropout": hf.get("dropout", 0.1), "attn_dropout": hf.get("attention_dropout", 0.0),
            "activation": ACTIVATIONS[act], "norm": "pre" if is_pegasus(hf) else "post", "positions": "sinusoidal",
            "max_len": max_len, "tie_embeddings": "all"}


def is_pegasus(hf: dict) -> bool:
    """Whether config.json is a PegasusConfig: the pre-norm class attnlab exports a pre-norm run as (its layers
    are Marian's, plus a final LayerNorm after each stack)."""
    return hf.get("model_type") == "pegasus" or "PegasusForConditionalGeneration" in (hf.get("architectures") or [])


def marian_rows(hf: dict, vocab: dict[str, int]) -> tuple[list[int], dict[str, int]]:
    """(rows, specials): rows[i] is the Hugging Face id of attnlab id i, [PAD, BOS, EOS, UNK, the rest in order].
    Marian starts the decoder with its pad: that token becomes BOS, and PAD a new dead row (-1)."""
    pad, eos, start = hf.get("pad_token_id"), hf.get("eos_token_id"), hf.get("decoder_start_token_id")
    specials = {"pad": pad, "eos": eos, "start": start, "unk": vocab.get("<unk>")}
    head = [pad if pad != start else -1, start, eos, specials["unk"]]
    real = [h for h in head if h != -1]
    if not all(isinstance(h, int) and 0 <= h < len(vocab) for h in real) or len(set(real)) != len(real):
        raise AttnlabError(f"special ids pad {pad}, decoder start {start}, eos {eos}, <unk> {specials['unk']}: each "
                           "must be a distinct id of vocab.json")
    bos = hf.get("bos_token_id")  # kept only to be written back by an export (attnlab's decoder starts with `start`)
    if isinstance(bos, int) and not isinstance(bos, bool) and 0 <= bos < len(vocab):
        specials["bos"] = bos
    return head + [i for i in range(len(vocab)) if i not in head], specials


@torch.no_grad()
def marian_state(hf: dict, sd: dict[str, Tensor], rows: list[int], where: Path) -> dict[str, Tensor]:
    """attnlab's state dict of a MarianMT's tensors: the inverse permutation of `export_tensors`, the vocabulary
    in `rows`' order (a dead row: zero embedding, output bias DEAD_LOGIT)."""
    D = hf["d_model"]
    inv = torch.argsort(hidden_permutation(D))  # attnlab dim j is Hugging Face dim inv[j]
    idx, dead = torch.tensor(rows).clamp(min=0), torch.tensor(rows) < 0

    def get(name: str) -> Tensor:
        return tensor(sd, name, where)  # float32; a missing one named

    for side in ("encoder", "decoder"):  # older conversions store the table; HF then uses the stored one
        table = sd.get(f"model.{side}.embed_positions.weight")
        pe = PositionalEncoding(D, table.size(0) if table is not None else 1).pe[:, hidden_permutation(D)]
        if table is not None and (table.shape != pe.shape or not torch.allclose(table.float(), pe, atol=1e-5)):
            raise AttnlabError(f"{where}: model.{side}.embed_positions.weight is not the sinusoid table (learned "
                               "positions); attnlab imports sinusoidal MarianMT models")
    out: dict[str, Tensor] = {}
    emb = get("model.shared.weight" if "model.shared.weight" in sd else "model.encoder.embed_tokens.weight")
    if emb.shape != (len(rows) - int(dead.sum()), D):
        raise AttnlabError(f"{where}: the embedding is {tuple(emb.shape)}, config.json and vocab.json say "
                           f"({len(rows) - int(dead.sum())}, {D}); the weights disagree with config.json")
    V_hf = emb.size(0)
    emb = emb[idx][:, inv].clone()
    emb[dead] = 0
    out["src_embed.weight"] = out["tgt_embed.weight"] = out["generator.weight"] = emb
    bias = get("final_logits_bias")[0] if "final_logits_bias" in sd else torch.zeros(V_hf)
    if bool(dead.any()) or bool(bias.any()):  # an attnlab export (zero bias, no dead row) comes back without one
        out["generator.bias"] = bias[idx].clone()
        out["generator.bias"][dead] = DEAD_LOGIT

    def lin(att: str, name: str, in_d: bool, out_d: bool) -> None:
        w, b = get(f"{name}.weight"), get(f"{name}.bias")
        w = w[:, inv] if in_d else w
        w, b = (w[inv], b[inv]) if out_d else (w, b)
        out[f"{att}.weight"], out[f"{att}.bias"] = w.clone(), b.clone()

    def norm(att: str, name: str) -> None:
        out[f"{att}.weight"], out[f"{att}.bias"] = get(f"{name}.weight")[inv].clone(), get(f"{name}.bias")[inv].clone()

    def layer(att: str, name: str, cross: bool) -> None:
        for ours, theirs, n in (("self_attn", "self_attn", "norm1"), ("cross_attn", "encoder_attn", "norm2")):
            if ours == "cross_attn" and not cross:
                continue
            for q, p in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj")):
                lin(f"{att}.{ours}.{q}", f"{name}.{theirs}.{p}", True, False)
            lin(f"{att}.{ours}.W_O", f"{name}.{theirs}.out_proj", False, True)
            norm(f"{att}.{n}", f"{name}.{theirs}_layer_norm")
        lin(f"{att}.ff.linear1", f"{name}.fc1", True, False)
        lin(f"{att}.ff.linear2", f"{name}.fc2", False, True)
        norm(f"{att}.{'norm3' if cross else 'norm2'}", f"{name}.final_layer_norm")

    for i in range(hf["encoder_layers"]):
        layer(f"encoder.{i}", f"model.encoder.layers.{i}", cross=False)
    for i in range(hf["decoder_layers"]):
        layer(f"decoder.{i}", f"model.decoder.layers.{i}", cross=True)
    if is_pegasus(hf):  # pre-norm: each stack ends with its LayerNorm
        norm("enc_norm", "model.encoder.layer_norm")
        norm("dec_norm", "model.decoder.layer_norm")
    return out


def import_marian(folder: Path, hf: dict) -> Imported:
    """A MarianMT folder (config.json `hf`) read for `attnlab.interop.huggingface.import_huggingface`: the model's
    model.transformer settings, its tokenizer (kind "marian", `attnlab.data.tokenizers.MarianVocabTokenizer`) and
    attnlab's state dict."""
    settings = marian_settings(hf, folder)  # typed and bounded before anything of their size is read or made
    tensors, vocab = read_marian(folder, hf)
    for prefix, key in (("model.encoder.layers.", "encoder_layers"), ("model.decoder.layers.", "decoder_layers")):
        check_layers(tensors, prefix, hf[key], key, folder)
    rows, specials = marian_rows(hf, vocab)
    state = marian_state(hf, tensors, rows, folder)
    settings["generator_bias"] = "generator.bias" in state
    spm_files = {}
    for name in ("source.spm", "target.spm"):
        if not (folder / name).is_file():
            raise AttnlabError(f"{folder / name}: missing (MarianTokenizer's SentencePiece model)")
        spm_files[name] = (folder / name).read_bytes()
    tok = MarianVocabTokenizer(spm_files["source.spm"], spm_files["target.spm"], vocab, rows, specials)
    return Imported(settings, {"kind": "marian", "vocab_size": len(rows), "joint": True, "byte_fallback": False},
                    tok, state, {"vocabulary": {"huggingface": len(vocab), "attnlab": len(rows)}})
