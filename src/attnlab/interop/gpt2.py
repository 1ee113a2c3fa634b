"""Decoder-only language models in and out of Hugging Face as GPT-2 (Radford et al. 2019; `transformers`'
GPT2LMHeadModel) or, for tied embeddings scaled by sqrt(D), BioGPT (Luo et al. 2022; BioGptForCausalLM: GPT-2's
layers with fairseq's scaled embeddings), called by `attnlab.interop.huggingface` for runs of the "causal-lm" kind
(the family row's `hf_kind`). Read and written with safetensors and JSON only (`attnlab.interop.hf_folder`).

Import: a GPT2LMHeadModel (or GPT2Model) folder becomes an ordinary language-model run whose settings say what
GPT-2 is (`attnlab.nn.lm.LMModelConfig`): learned positions, no sqrt(D) embedding scale, pre-norm with the
final LayerNorm, its activation (gelu_new: the tanh GELU), biases, its LayerNorm epsilon, the output layer tied to
the embeddings (or not, as the folder says). Its tokenizer is the folder's own (tokenizer.json, or GPT-2's
vocab.json + merges.txt built into one as `transformers`' GPT2Tokenizer builds it), run by the `tokenizers`
library (`attnlab.data.tokenizers.ImportedTokenizer`). attnlab's LM reads [BOS] + text: GPT-2's BOS is its
<|endoftext|>, which is also its EOS, so the import's BOS row is a dead output row, as are PAD and UNK, which GPT-2
has not (`attnlab.interop.hf_folder.dead_rows`).

A BioGptForCausalLM folder with a tokenizer.json (an export's) comes back the same way, scale_embeddings as its
scale_embedding says (BioGPT's own Moses tokenizer is not read: no tokenizer.json, refused).

Export: a run whose settings GPT-2 expresses becomes a GPT2LMHeadModel folder. Exact, not close:
- positions: attnlab's table (sinusoidal or learned) written into wpe, which GPT-2 adds as attnlab does;
- sqrt(D) scale: folded into wte when the output layer is untied (wte = sqrt(D) E, the product attnlab computes);
  with tied embeddings GPT-2's one matrix cannot be both E and sqrt(D) E, so such a run (attnlab's default LM)
  becomes a BioGptForCausalLM, which multiplies its embedding by sqrt(D) as attnlab does, ties it to the output
  layer, and adds a learned position table from row BIOGPT_OFFSET (attnlab's table written there); its
  LayerNorms have torch's default epsilon, 1e-5;
- refused, one line each: post-norm (both classes are pre-norm), an output bias that is not zero (neither output
  layer has one), another LayerNorm epsilon with tied scaled embeddings, and a tokenizer `transformers` cannot
  run as attnlab does (char; SentencePiece BPE);
- `bias = false`: zero biases, which both classes add exactly.
The tokenizer travels as tokenizer.json: an import's own, or attnlab's SentencePiece unigram model rewritten for
the `tokenizers` library (the same pieces and scores, the identity normalisation, "\u2581" for spaces and one
prepended, byte fallback, the specials never matched in text) whose post-processor puts BOS first, so that
`tok(prompt)` is what attnlab's LM reads. Export -> import -> export gives the same tensors bit for bit.

Weight names (i: layer; GPT-2's Conv1D weights are (in, out), attnlab's Linear ones (out, in): transposed):

| attnlab                                    | Hugging Face GPT2LMHeadModel                           |
|--------------------------------------------|--------------------------------------------------------|
| embed.weight (x sqrt(D) when folded)       | transformer.wte.weight                                 |
| pos.learned.weight / pos.pe                | transformer.wpe.weight                                 |
| layers.i.norm1, layers.i.norm2             | transformer.h.i.ln_1, transformer.h.i.ln_2             |
| layers.i.self_attn.W_Q / W_K / W_V         | transformer.h.i.attn.c_attn (the three side by side)   |
| layers.i.self_attn.W_O                     | transformer.h.i.attn.c_proj                            |
| layers.i.ff.linear1 / linear2              | transformer.h.i.mlp.c_fc / c_proj                      |
| norm                                       | transformer.ln_f                                       |
| generator.weight (untied)                  | lm_head.weight                                         |

Shape legend: V vocabulary, P positions, D d_model, F d_ff.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import sentencepiece as spm
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from torch import Tensor

from attnlab.core.config import MAX_LAYERS, MAX_LEN, MAX_VOCAB
from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, ImportedTokenizer
from attnlab.families.base import LoadedRun
from attnlab.interop.hf_folder import (Imported, architecture, choice, dead_bias, dead_rows, export_order,
                                       gather_rows, TensorReader, json_bytes, parse_tokenizer, read_weights, setting,
                                       special_rows)

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu", "swish": "silu"}  # Hugging Face -> attnlab
TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu"}
IGNORED = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers older GPT-2 checkpoints store
BIOGPT_OFFSET = 2  # BioGPT's position table starts at row 2 (fairseq's padding offset)
EXPORT_FILES = frozenset({"tokenizer.json"})  # besides config.json, generation_config.json, tokenizer_config.json
LOAD_LINES = ("from transformers import AutoModelForCausalLM, AutoTokenizer",
              "tok, model = AutoTokenizer.from_pretrained(DIR), AutoModelForCausalLM.from_pretrained(DIR)",
              "print(tok.batch_decode(model.generate(**tok([\"In the beginning\"], return_tensors=\"pt\"), "
              "max_new_tokens=30)))")


# ============================================================================================ import
def read_tokenizer(folder: Path) -> str:
    """The folder's tokenizer as tokenizer.json text: tokenizer.json itself, or GPT-2's vocab.json + merges.txt
    built the way `transformers`' GPT2Tokenizer builds them (byte-level BPE; tokenizer_config.json's special tokens,
    by default <|endoftext|>, added)."""
    if (folder / "tokenizer.json").is_file():
        try:
            return (folder / "tokenizer.json").read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise AttnlabError(f"{folder / 'tokenizer.json'}: not UTF-8 text (byte {e.start:,})") from None
    if not ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()):
        raise AttnlabError(f"{folder}: no tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    try:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
        cfg_path = folder / "tokenizer_config.json"
        tok_cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                   end_of_word_suffix="", fuse_unk=False))
    except Exception as e:  # JSON, UTF-8, or the library's own error type for a malformed vocabulary
        raise AttnlabError(f"{folder}: cannot read vocab.json and merges.txt ({str(e).strip()[:120]})") from None
    if not isinstance(tok_cfg, dict):
        raise AttnlabError(f"{folder / 'tokenizer_config.json'}: expected a JSON object")
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(tok_cfg.get("add_prefix_space", False)))
    tok.decoder = decoders.ByteLevel()
    defaults = {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    specials = [tok_cfg.get(k, defaults.get(k)) for k in ("unk_token", "bos_token", "eos_token", "pad_token")]
    tok.add_special_tokens(list(dict.fromkeys(t for t in specials if isinstance(t, str))))  # as GPT2Tokenizer does
    return tok.to_str()


def unk_id(tokenizer_json: str, where: Path) -> int | None:
    """The id of the tokenizer model's unknown token (a Unigram's unk_id, a BPE's or WordPiece's unk_token)."""
    lib, spec = parse_tokenizer(tokenizer_json, where)
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if isinstance(model.get("unk_id"), int):
        return model["unk_id"]
    return lib.token_to_id(model["unk_token"]) if isinstance(model.get("unk_token"), str) else None


def gpt2_settings(hf: dict, where: Path) -> dict:
    """attnlab's model.lm settings of a GPT2Config; a setting attnlab's LM has not is refused, named."""
    act = choice(hf, "activation_function", "gelu_new", ACTIVATIONS, where)
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("add_cross_attention", False)):
        if hf.get(key, want) != want:
            raise AttnlabError(f"{where}: {key} = {json.dumps(hf.get(key))}; attnlab's attention is "
                               f"softmax(q k / sqrt(d_k)) with no cross-attention ({key} = {json.dumps(want)})")
    D = setting(hf, "n_embd", where)
    inner = hf.get("n_inner")
    return {"d_model": D, "h": setting(hf, "n_head", where), "layers": setting(hf, "n_layer", where, MAX_LAYERS),
            "d_ff": 4 * D if inner is None else setting(hf, "n_inner", where),
            "max_len": setting(hf, "n_positions", where, MAX_LEN), "activation": ACTIVATIONS[act],
            "dropout": hf.get("resid_pdrop", 0.1), "attn_dropout": hf.get("attn_pdrop", 0.1),
            "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5), "norm": "pre", "positions": "learned",
            "scale_embeddings": False, "bias": True, "tie_embeddings": bool(hf.get("tie_word_embeddings", True))}


@torch.no_grad()
def gpt2_state(sd: dict[str, Tensor], s: dict, rows: list[int], where: Path) -> dict[str, Tensor]:
    """attnlab's TransformerLM state dict of GPT-2's tensors (the table of the module docstring), the vocabulary
    in `rows`' order; a tensor the model has not is refused, named."""
    reader = TensorReader({k.removeprefix("transformer."): v for k, v in sd.items() if not k.endswith(IGNORED)},
                          where)
    get = reader.get
    D, F = s["d_model"], s["d_ff"]
    V = get("wte.weight").size(0)
    out = {"embed.weight": gather_rows(get("wte.weight", V, D), rows),
           "pos.learned.weight": get("wpe.weight", s["max_len"], D).clone(),
           "norm.weight": get("ln_f.weight", D), "norm.bias": get("ln_f.bias", D)}
    for i in range(s["layers"]):
        p, q = f"h.{i}.", f"layers.{i}."
        w, b = get(p + "attn.c_attn.weight", D, 3 * D), get(p + "attn.c_attn.bias", 3 * D)  # Conv1D: (in, out)
        for k, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"self_attn.{name}.weight"] = w[:, k * D:(k + 1) * D].T.clone()  # (D, D) (out, in)
            out[q + f"self_attn.{name}.bias"] = b[k * D:(k + 1) * D].clone()
        out[q + "self_attn.W_O.weight"] = get(p + "attn.c_proj.weight", D, D).T.clone()
        out[q + "self_attn.W_O.bias"] = get(p + "attn.c_proj.bias", D)
        out[q + "ff.linear1.weight"] = get(p + "mlp.c_fc.weight", D, F).T.clone()  # (F, D)
        out[q + "ff.linear1.bias"] = get(p + "mlp.c_fc.bias", F)
        out[q + "ff.linear2.weight"] = get(p + "mlp.c_proj.weight", F, D).T.clone()  # (D, F)
        out[q + "ff.linear2.bias"] = get(p + "mlp.c_proj.bias", D)
        for n, ln in (("norm1", "ln_1"), ("norm2", "ln_2")):
            out[q + f"{n}.weight"], out[q + f"{n}.bias"] = get(p + f"{ln}.weight", D), get(p + f"{ln}.bias", D)
    reader.skip("lm_head.weight")  # tied: a folder may store it, wte again
    output_layer(out, s, rows, None if s["tie_embeddings"] else get("lm_head.weight", V, D))
    reader.refuse_unread("GPT2LMHeadModel")
    return out


def output_layer(out: dict[str, Tensor], s: dict, rows: list[int], lm_head: Tensor | None) -> None:
    """The output layer's weight (the embedding when tied) and bias (DEAD_LOGIT on the dead rows; zeros untied)."""
    if s["tie_embeddings"]:
        out["generator.weight"] = out["embed.weight"]
        bias = dead_bias(rows)
    else:
        out["generator.weight"] = gather_rows(lm_head, rows)
        bias = dead_bias(rows, torch.zeros(lm_head.size(0)))
    if bias is not None:
        out["generator.bias"] = bias


def biogpt_settings(hf: dict, where: Path) -> dict:
    """attnlab's model.lm settings of a BioGptConfig (its LayerNorms have torch's default epsilon, 1e-5)."""
    act = choice(hf, "hidden_act", "gelu", ACTIVATIONS, where)
    return {"d_model": setting(hf, "hidden_size", where), "h": setting(hf, "num_attention_heads", where),
            "layers": setting(hf, "num_hidden_layers", where, MAX_LAYERS), "d_ff": setting(hf, "intermediate_size", where),
            "max_len": setting(hf, "max_position_embeddings", where, MAX_LEN), "activation": ACTIVATIONS[act],
            "dropout": hf.get("hidden_dropout_prob", 0.1), "attn_dropout": hf.get("attention_probs_dropout_prob", 0.1),
            "layer_norm_eps": 1e-5, "norm": "pre", "positions": "learned", "bias": True,
            "scale_embeddings": bool(hf.get("scale_embedding", True)),
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True))}


@torch.no_grad()
def biogpt_state(sd: dict[str, Tensor], s: dict, rows: list[int], where: Path) -> dict[str, Tensor]:
    """attnlab's TransformerLM state dict of BioGPT's tensors (Linear weights, as attnlab's); the position table's
    first BIOGPT_OFFSET rows, which BioGPT never reads, are left out."""
    reader = TensorReader(sd, where)
    get = reader.get
    D, F = s["d_model"], s["d_ff"]
    V = get("biogpt.embed_tokens.weight").size(0)
    out = {"embed.weight": gather_rows(get("biogpt.embed_tokens.weight", V, D), rows),
           "pos.learned.weight": get("biogpt.embed_positions.weight", s["max_len"] + BIOGPT_OFFSET, D)[BIOGPT_OFFSET:],
           "norm.weight": get("biogpt.layer_norm.weight", D), "norm.bias": get("biogpt.layer_norm.bias", D)}
    for i in range(s["layers"]):
        p, q = f"biogpt.layers.{i}.", f"layers.{i}."
        for ours, theirs, n_out, n_in in (("self_attn.W_Q", "self_attn.q_proj", D, D),
                                          ("self_attn.W_K", "self_attn.k_proj", D, D),
                                          ("self_attn.W_V", "self_attn.v_proj", D, D),
                                          ("self_attn.W_O", "self_attn.out_proj", D, D),
                                          ("ff.linear1", "fc1", F, D), ("ff.linear2", "fc2", D, F),
                                          ("norm1", "self_attn_layer_norm", D, 0), ("norm2", "final_layer_norm", D, 0)):
            out[q + ours + ".weight"] = get(p + theirs + ".weight", *((n_out, n_in) if n_in else (n_out,)))
            out[q + ours + ".bias"] = get(p + theirs + ".bias", n_out)
    reader.skip("output_projection.weight")
    output_layer(out, s, rows, None if s["tie_embeddings"] else get("output_projection.weight", V, D))
    reader.refuse_unread("BioGptForCausalLM")
    return {k: v.clone() for k, v in out.items()}


def import_causal_lm(folder: Path, hf: dict) -> Imported:
    """A GPT2LMHeadModel, GPT2Model or BioGptForCausalLM folder (config.json `hf`) read for
    `attnlab.interop.huggingface.import_huggingface`."""
    biogpt = architecture(hf) == "BioGptForCausalLM"
    settings = biogpt_settings(hf, folder) if biogpt else gpt2_settings(hf, folder)
    sd = read_weights(folder)
    tokenizer_json = read_tokenizer(folder)
    wte = next((sd[k] for k in ("transformer.wte.weight", "wte.weight", "biogpt.embed_tokens.weight") if k in sd),
               None)
    V = wte.size(0) if wte is not None else setting(hf, "vocab_size", folder, MAX_VOCAB)
    if hf.get("vocab_size", V) != V:
        raise AttnlabError(f"{folder}: config.json says vocab_size {hf.get('vocab_size')}, the embedding has {V} "
                           "rows; the weights disagree with config.json")
    specials = {"pad": hf.get("pad_token_id"), "bos": hf.get("bos_token_id"), "eos": hf.get("eos_token_id"),
                "unk": unk_id(tokenizer_json, folder)}
    rows = special_rows(V, specials["pad"], specials["bos"], specials["eos"], specials["unk"], folder)
    state = (biogpt_state if biogpt else gpt2_state)(sd, settings, rows, folder)
    settings["generator_bias"] = settings["tie_embeddings"] and "generator.bias" in state
    tok = ImportedTokenizer(tokenizer_json, rows, specials)
    return Imported(settings, {"kind": "huggingface", "vocab_size": len(rows), "joint": True, "byte_fallback": False},
                    tok, state, {"vocabulary": {"huggingface": V, "attnlab": len(rows)}})


# ============================================================================================ export
def refusal(run: LoadedRun) -> str | None:
    """The one line naming the setting of an LM run that neither GPT2LMHeadModel nor BioGptForCausalLM (the class
    for tied, scaled embeddings) expresses, or None."""
    cfg, model, kind = run.model.cfg, run.model, run.tokenizers.tgt.kind
    if cfg.norm != "pre":
        return ("model.lm.norm = 'post': GPT2LMHeadModel and BioGptForCausalLM are pre-norm (a LayerNorm before "
                "each sublayer and one after the stack)")
    if biogpt(cfg) and cfg.layer_norm_eps != 1e-5:
        return (f"model.lm.layer_norm_eps = {cfg.layer_norm_eps} with tied, scaled embeddings: GPT-2 cannot scale "
                "its one embedding matrix, and BioGptForCausalLM, which does, fixes the LayerNorm epsilon at 1e-5")
    if kind not in ("unigram", "huggingface"):
        return (f"tokenizer.kind = {kind!r}: the exported tokenizer.json reproduces attnlab's ids for a unigram "
                "SentencePiece model (or an imported tokenizer); train with kind = 'unigram'")
    if model.generator.bias is not None:
        live = torch.ones(model.generator.out_features, dtype=torch.bool)
        if kind == "huggingface":
            live[dead_rows(run.tokenizers.tgt.rows)] = False
        if bool(model.generator.bias[live].any()):
            return ("the output layer's bias (model.lm.tie_embeddings = false or generator_bias = true give it "
                    "one) is not zero, and the output layers of GPT2LMHeadModel and BioGptForCausalLM have none")
    return None


def biogpt(cfg) -> bool:
    """Whether an LM config is exported as BioGptForCausalLM: tied embeddings scaled by sqrt(D), which GPT-2's one
    unscaled matrix cannot be (untied, the scale is folded into GPT-2's wte)."""
    return cfg.tie_embeddings and cfg.scale_embeddings


def zeros_for(linear, n: int) -> Tensor:
    return linear.bias if linear.bias is not None else torch.zeros(n)


@torch.no_grad()
def gpt2_tensors(model, order: Tensor) -> dict[str, Tensor]:
    """GPT2LMHeadModel's tensors of an attnlab TransformerLM, its rows in Hugging Face's order `order`."""
    cfg, D = model.cfg, model.cfg.d_model
    wte = model.embed.weight[order]
    if cfg.scale_embeddings:  # folded: the product attnlab computes, E[tokens] * sqrt(D) (untied only)
        wte = wte * math.sqrt(D)
    pos = model.pos.learned.weight if model.pos.learned is not None else model.pos.pe
    sd = {"transformer.wte.weight": wte, "transformer.wpe.weight": pos}
    for i, layer in enumerate(model.layers):
        p, a = f"transformer.h.{i}.", layer.self_attn
        sd[p + "attn.c_attn.weight"] = torch.cat([a.W_Q.weight, a.W_K.weight, a.W_V.weight]).T  # (D, 3D) (in, out)
        sd[p + "attn.c_attn.bias"] = torch.cat([zeros_for(x, D) for x in (a.W_Q, a.W_K, a.W_V)])
        for name, linear, n in (("attn.c_proj", a.W_O, D), ("mlp.c_fc", layer.ff.linear1, cfg.d_ff),
                                ("mlp.c_proj", layer.ff.linear2, D)):
            sd[p + name + ".weight"], sd[p + name + ".bias"] = linear.weight.T, zeros_for(linear, n)  # Conv1D
        for name, ln in (("ln_1", layer.norm1), ("ln_2", layer.norm2)):
            sd[p + name + ".weight"], sd[p + name + ".bias"] = ln.weight, zeros_for(ln, D)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = model.norm.weight, zeros_for(model.norm, D)
    if not cfg.tie_embeddings:
        sd["lm_head.weight"] = model.generator.weight[order]
    return sd


@torch.no_grad()
def biogpt_tensors(model, order: Tensor) -> dict[str, Tensor]:
    """BioGptForCausalLM's tensors of an attnlab TransformerLM (tied, scaled: BioGPT scales as attnlab does); its
    position table has BIOGPT_OFFSET rows before position 0, written as zeros."""
    cfg, D = model.cfg, model.cfg.d_model
    pos = model.pos.learned.weight if model.pos.learned is not None else model.pos.pe
    sd = {"biogpt.embed_tokens.weight": model.embed.weight[order],
          "biogpt.embed_positions.weight": torch.cat([torch.zeros(BIOGPT_OFFSET, D), pos])}
    for i, layer in enumerate(model.layers):
        p, a = f"biogpt.layers.{i}.", layer.self_attn
        for name, m, n in (("self_attn.q_proj", a.W_Q, D), ("self_attn.k_proj", a.W_K, D),
                           ("self_attn.v_proj", a.W_V, D), ("self_attn.out_proj", a.W_O, D),
                           ("fc1", layer.ff.linear1, cfg.d_ff), ("fc2", layer.ff.linear2, D),
                           ("self_attn_layer_norm", layer.norm1, D), ("final_layer_norm", layer.norm2, D)):
            sd[p + name + ".weight"], sd[p + name + ".bias"] = m.weight, zeros_for(m, n)
    sd["biogpt.layer_norm.weight"], sd["biogpt.layer_norm.bias"] = model.norm.weight, zeros_for(model.norm, D)
    return sd


def hf_config(cfg, V: int, specials: dict) -> dict:
    """config.json: GPT2Config or BioGptConfig keys, written by hand."""
    ids = {"bos_token_id": specials["bos"], "eos_token_id": specials["eos"], "pad_token_id": specials["pad"],
           "tie_word_embeddings": cfg.tie_embeddings, "use_cache": True, "dtype": "float32", "vocab_size": V}
    if biogpt(cfg):
        return {"architectures": ["BioGptForCausalLM"], "model_type": "biogpt", "hidden_size": cfg.d_model,
                "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.h, "intermediate_size": cfg.d_ff,
                "hidden_act": TO_HF[cfg.activation], "hidden_dropout_prob": cfg.dropout,
                "attention_probs_dropout_prob": cfg.attn_dropout, "activation_dropout": 0.0, "layerdrop": 0.0,
                "max_position_embeddings": cfg.max_len, "layer_norm_eps": 1e-5, "scale_embedding": True, **ids}
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": cfg.max_len,
            "n_embd": cfg.d_model, "n_layer": cfg.layers, "n_head": cfg.h, "n_inner": cfg.d_ff,
            "activation_function": TO_HF[cfg.activation], "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
            "attn_pdrop": cfg.attn_dropout, "layer_norm_epsilon": cfg.layer_norm_eps, "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, **ids}


def unigram_tokenizer_json(model_proto: bytes) -> str:
    """attnlab's SentencePiece unigram model (trained with the identity normalisation, spaces kept, a "\u2581"
    prepended, byte fallback: `attnlab.data.tokenizers.SentencePieceTokenizer`) as a `tokenizers` tokenizer.json
    giving the same pieces: the pieces and scores (specials and bytes never matched in text), the same
    normalisation, BOS put first by the post-processor."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    byte_fallback = any(sp.is_byte(i) for i in range(sp.get_piece_size()))
    tok = Tokenizer(models.Unigram(vocab, unk_id=UNK_ID, byte_fallback=byte_fallback))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single=f"{SPECIALS[BOS_ID]} $A",
                                                       special_tokens=[(SPECIALS[BOS_ID], BOS_ID)])
    return tok.to_str()


def tokenizer_files(run: LoadedRun, specials: dict, pieces: dict) -> dict[str, bytes]:
    """tokenizer.json and tokenizer_config.json (PreTrainedTokenizerFast: the file as it is)."""
    tok = run.tokenizers.tgt
    text = tok.tokenizer_json if isinstance(tok, ImportedTokenizer) else unigram_tokenizer_json(tok.to_bytes())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": run.model.cfg.max_len,
              "clean_up_tokenization_spaces": False, **{f"{k}_token": v for k, v in pieces.items() if v}}
    if not isinstance(tok, ImportedTokenizer):
        config["split_special_tokens"] = True  # "</s>" typed in a prompt is text to attnlab, not the special token
    return {"tokenizer.json": text.encode(), "tokenizer_config.json": json_bytes(config)}


def export_causal_lm(run: LoadedRun) -> tuple[dict[str, Tensor], dict[str, bytes]]:
    """(model.safetensors' tensors, the other files) of a loaded language-model run as a GPT2LMHeadModel folder, or
    a BioGptForCausalLM one for tied, scaled embeddings (`biogpt`); a setting neither expresses is an AttnlabError
    (`refusal`)."""
    line = refusal(run)
    if line is not None:
        raise AttnlabError(f"{run.run_dir}: cannot export to Hugging Face: {line}")
    model, tok, cfg = run.model, run.tokenizers.tgt, run.model.cfg
    if isinstance(tok, ImportedTokenizer):
        order = export_order(tok.rows)
        specials = dict(tok.specials)
        pieces = {k: tok.token(v) for k, v in specials.items()}
    else:
        order = torch.arange(tok.vocab_size)
        specials = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}
        pieces = {k: SPECIALS[v] for k, v in specials.items()}
    banned = [PAD_ID, BOS_ID, *tok.control_ids]
    hf_of = {int(a): h for h, a in enumerate(order.tolist())}
    suppress = sorted({hf_of[i] for i in banned if i in hf_of and hf_of[i] != specials.get("eos")})
    config = hf_config(cfg, order.numel(), specials)
    generation = {"bos_token_id": specials["bos"], "eos_token_id": specials["eos"], "pad_token_id": specials["pad"],
                  "suppress_tokens": suppress, "max_length": cfg.max_len}
    files = {"config.json": json_bytes(config), "generation_config.json": json_bytes(generation),
             **tokenizer_files(run, specials, pieces),
             "README.md": model_card(run, config["architectures"][0]).encode()}
    return (biogpt_tensors if biogpt(cfg) else gpt2_tensors)(model, order), files


def model_card(run: LoadedRun, cls: str) -> str:
    """README.md: what the model is and the lines that load it."""
    cfg = run.model.cfg
    return "\n".join([
        f"# {run.run_dir.name}", "",
        f"A {cfg.layers}-layer pre-norm decoder-only Transformer LM (d_model {cfg.d_model}, {cfg.h} heads, d_ff "
        f"{cfg.d_ff}, {cfg.activation}) from attnlab, exported as `{cls}` (`attnlab export --to "
        f"huggingface`, {run.checkpoint} checkpoint); it computes what attnlab computes.", "",
        "attnlab's LM reads BOS first: the tokenizer puts it there (an imported GPT-2 model's BOS is its "
        "<|endoftext|>, which you prepend yourself).", "", "## Load it", "", "```python",
        "DIR = \"path/to/this/folder\"", *LOAD_LINES, "```", ""])
