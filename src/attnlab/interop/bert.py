"""BERT-class encoders in from Hugging Face (Devlin et al. 2019; `transformers`' BertModel and the BertFor*
classes), called by `attnlab.interop.huggingface` for the "encoder" kind (the family row's `hf_kind`): the folder
becomes a run of the family whose model is MiniLM's BERT encoder in attnlab's layers
(`attnlab.nn.bert.BertEncoder`, `attnlab.families.bert`): word + position + token-type embeddings,
the embedding LayerNorm, post-norm layers, GELU, LayerNorm epsilon 1e-12 (as config.json says). Read with
safetensors and JSON only (`attnlab.interop.hf_folder`).

The encoder's tensors are kept and renamed (`attnlab.families.minilm.bert_key_map`, a leading "bert."
stripped); the heads a BertFor* class puts on top (the masked-LM head "cls.*", a classifier, BertModel's pooler)
are left out and listed in RUN_DIR/imported.json. The tokenizer is the folder's own (tokenizer.json, or BERT's
vocab.txt built into one as `transformers`' BertTokenizer builds it: BertNormalizer with the folder's
do_lower_case, BertPreTokenizer, WordPiece, [CLS] a [SEP] b [SEP] with token types 0 and 1), run by the
`tokenizers` library; its ids are put in attnlab's order ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, then the rest), the
embedding rows with them.

Shape legend: V vocabulary, P positions, D d_model.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from torch import Tensor

from attnlab.core.config import MAX_LAYERS, MAX_LEN, MAX_VOCAB
from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import ImportedTokenizer
from attnlab.families.minilm import UNUSED_KEYS, bert_key_map
from attnlab.interop.hf_folder import (Imported, choice, gather_rows, parse_tokenizer, read_weights, setting,
                                       special_rows, tensor)

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}  # Hugging Face -> attnlab
WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def read_tokenizer(folder: Path) -> str:
    """The folder's tokenizer as tokenizer.json text: tokenizer.json itself, or BERT's vocab.txt built the way
    `transformers`' BertTokenizer builds it (tokenizer_config.json's do_lower_case, tokenize_chinese_chars and
    strip_accents)."""
    if (folder / "tokenizer.json").is_file():
        try:
            return (folder / "tokenizer.json").read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise AttnlabError(f"{folder / 'tokenizer.json'}: not UTF-8 text (byte {e.start:,})") from None
    if not (folder / "vocab.txt").is_file():
        raise AttnlabError(f"{folder}: no tokenizer (tokenizer.json, or vocab.txt)")
    try:
        pieces = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
        cfg_path = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    except (OSError, ValueError, RecursionError) as e:
        raise AttnlabError(f"{folder}: cannot read vocab.txt or tokenizer_config.json ({str(e)[:120]})") from None
    if not isinstance(cfg, dict):
        raise AttnlabError(f"{folder / 'tokenizer_config.json'}: expected a JSON object")
    vocab = {p: i for i, p in enumerate(pieces)}
    if len(vocab) != len(pieces) or not {"[UNK]", "[CLS]", "[SEP]"} <= set(vocab):
        raise AttnlabError(f"{folder / 'vocab.txt'}: expected one piece per line, each once, with [UNK], [CLS] and "
                           "[SEP]")
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=bool(cfg.get("tokenize_chinese_chars", True)),
        strip_accents=cfg.get("strip_accents"), lowercase=bool(cfg.get("do_lower_case", True)))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([p for p in WORDPIECE_SPECIALS if p in vocab])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tok.to_str()


def bert_settings(hf: dict, where: Path) -> dict:
    """attnlab's model.bert settings of a BertConfig; a setting the encoder has not is refused, named."""
    act = choice(hf, "hidden_act", "gelu", ACTIVATIONS, where)
    for key, want in (("position_embedding_type", "absolute"), ("is_decoder", False), ("add_cross_attention", False)):
        if hf.get(key, want) != want:
            raise AttnlabError(f"{where}: {key} = {json.dumps(hf.get(key))}; attnlab's BERT encoder has absolute "
                               f"learned positions and no decoder mode ({key} = {json.dumps(want)})")
    return {"d_model": setting(hf, "hidden_size", where), "h": setting(hf, "num_attention_heads", where),
            "d_ff": setting(hf, "intermediate_size", where), "layers": setting(hf, "num_hidden_layers", where, MAX_LAYERS),
            "max_len": setting(hf, "max_position_embeddings", where, MAX_LEN),
            "type_vocab_size": hf.get("type_vocab_size", 2), "activation": ACTIVATIONS[act],
            "layer_norm_eps": hf.get("layer_norm_eps", 1e-12), "dropout": hf.get("hidden_dropout_prob", 0.1),
            "attn_dropout": hf.get("attention_probs_dropout_prob", 0.1)}


def bert_state(sd: dict[str, Tensor], s: dict, rows: list[int], where: Path) -> tuple[dict[str, Tensor], list[str]]:
    """(attnlab's BertEncoder state dict, the names of the tensors left out: heads and pooler). The vocabulary in
    `rows`' order; a missing or mis-shaped encoder tensor is refused, named."""
    sd = {k.removeprefix("bert."): v for k, v in sd.items()}
    names = bert_key_map(s["layers"])
    out = {ours: tensor(sd, theirs, where).clone() for theirs, ours in names.items()}
    V = out["embeddings.word.weight"].size(0)
    shapes = {"embeddings.word.weight": (V, s["d_model"]), "embeddings.position.weight": (s["max_len"], s["d_model"]),
              "embeddings.token_type.weight": (s["type_vocab_size"], s["d_model"])}
    for ours, shape in shapes.items():
        theirs = next(t for t, o in names.items() if o == ours)
        tensor(sd, theirs, where, shape)
    out["embeddings.word.weight"] = gather_rows(out["embeddings.word.weight"], rows)
    left = sorted(k for k in sd if k not in names and k not in UNUSED_KEYS)
    unknown = [k for k in left if not k.startswith(("cls.", "classifier.", "qa_outputs.", "pooler."))]
    if unknown:
        raise AttnlabError(f"{where}: unexpected tensor {unknown[0]} ({len(unknown)} in all); config.json says "
                           f"{s['layers']} layers of a BERT encoder")
    return out, left


def import_bert(folder: Path, hf: dict) -> Imported:
    """A BertModel / BertFor* folder (config.json `hf`) read for `attnlab.interop.huggingface.import_huggingface`."""
    settings = bert_settings(hf, folder)
    sd = read_weights(folder)
    tokenizer_json = read_tokenizer(folder)
    lib = parse_tokenizer(tokenizer_json, folder)[0]
    word = sd.get("embeddings.word_embeddings.weight", sd.get("bert.embeddings.word_embeddings.weight"))
    V = word.size(0) if word is not None else setting(hf, "vocab_size", folder, MAX_VOCAB)
    if hf.get("vocab_size", V) != V:
        raise AttnlabError(f"{folder}: config.json says vocab_size {hf.get('vocab_size')}, the embedding has {V} "
                           "rows; the weights disagree with config.json")
    ids = {name: lib.token_to_id(token) for name, token in (("pad", "[PAD]"), ("bos", "[CLS]"), ("eos", "[SEP]"),
                                                             ("unk", "[UNK]"))}
    if hf.get("pad_token_id") is not None:
        ids["pad"] = hf["pad_token_id"]
    rows = special_rows(V, ids["pad"], ids["bos"], ids["eos"], ids["unk"], folder)
    state, left = bert_state(sd, settings, rows, folder)
    tok = ImportedTokenizer(tokenizer_json, rows, ids)
    return Imported(settings, {"kind": "huggingface", "vocab_size": len(rows), "joint": True, "byte_fallback": False},
                    tok, state, {"vocabulary": {"huggingface": V, "attnlab": len(rows)}, "left_out": left})
