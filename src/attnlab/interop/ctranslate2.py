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
  their LayerNorms, pre- or post-norm (`pre_norm`), ReLU, exact GELU or SiLU (swish), LayerNorm epsilon as configured;
- the output layer (tied or not: the weights are copied), the final LayerNorms of pre-norm stacks.

The source gets attnlab's EOS appended by the caller (as `Translator.encode_source` does), decoding starts from
<s>. Which spec a run gets is its family row's `export` (`attnlab.families.base.Family`): "translator" (the
encoder-decoder) or "generator" (the decoder-only LM); a family without one is refused (the RNN: CTranslate2 has no
RNN models).

An export is written like a checkpoint (`export_ctranslate2`): into a new private folder, then renamed into place,
with attnlab.json (MANIFEST) recording the checkpoint's and the tokenizer's SHA-256 and every file's; nothing is
written through a symlink. Before an export is loaded, `check_export` holds it against its manifest and the run's
tokenizer: `attnlab.runs.workflow` rebuilds the run's own export when it is stale or damaged, and refuses an export
named with --ct2-model with one line naming the file.

Shape legend: D d_model, V vocabulary, N layers.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import torch

from attnlab.core.checkpoint import resolve_checkpoint
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import (atomic_write_bytes, check_replaceable_folder, file_sha256, make_dirs, new_folder,
                                 read_json, read_lines, replace_folder, write_json)
from attnlab.data.tokenizers import SPECIALS, TokenizerPair
from attnlab.families.base import LoadedRun
from attnlab.families.table import FAMILIES, titles

log = logging.getLogger("attnlab")

MANIFEST = "attnlab.json"  # what the export was made from, and each file's size and SHA-256
# what an export folder may hold: CTranslate2's files, the tokenizer, MANIFEST, and temporary files of a write a
# kill interrupted (an export replaces the whole folder, so anything else in it would be deleted)
EXPORT_NAME = re.compile(r"\.?(model\.bin|config\.json|attnlab\.json|tokenizer|"
                         r"(shared_|source_|target_)?vocabulary\.(json|txt))(\.[0-9a-f]+\.(tmp|old))?")
EXPORTS = ("translator", "generator")  # the CTranslate2 models a family row's `export` names: ctranslate2.Translator's
# encoder-decoder (`transformer_spec`), ctranslate2.Generator's decoder-only language model (`language_model_spec`)
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


def written_config(model) -> dict:
    """The values of config.json that attnlab writes for `model` beyond its special tokens (`_output`): an export
    of that model must hold them, whatever its MANIFEST says (a forged config.json with a re-hashed MANIFEST)."""
    return {"layer_norm_epsilon": float(model.cfg.layer_norm_eps)}


def _output(spec, decoder_spec, model) -> None:
    """The output layer (a zero bias where attnlab has none), the config values of `written_config` and attnlab's
    special tokens."""
    generator = model.generator
    _linear(decoder_spec.projection, generator)
    if generator.bias is None:
        decoder_spec.projection.bias = np.zeros(generator.out_features, dtype=np.float32)
    for key, value in written_config(model).items():
        setattr(spec.config, key, value)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = SPECIALS[3], SPECIALS[1], SPECIALS[2]


def _activation(specs, name: str):
    """CTranslate2's activation of a TransformerConfig.activation (silu and swish are one function)."""
    return {"relu": specs.Activation.RELU, "gelu": specs.Activation.GELU, "gelu_tanh": specs.Activation.GELUTanh,
            "silu": specs.Activation.SWISH, "swish": specs.Activation.SWISH}[name]


def _positions(pos) -> np.ndarray:
    return _np(pos.learned.weight if pos.learned is not None else pos.pe)  # (max_len, D)


def transformer_spec(model, src_vocab: list[str], tgt_vocab: list[str]):
    """The `ctranslate2.specs.TransformerSpec` holding the weights of an attnlab `TransformerSeq2Seq`."""
    ct2 = _ct2()
    specs = ct2.specs
    cfg = model.cfg
    activation = _activation(specs, cfg.activation)
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
    _output(spec, dec, model)
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
    activation = _activation(specs, cfg.activation)
    spec = specs.TransformerDecoderModelSpec.from_config(cfg.layers, cfg.h, pre_norm=cfg.norm == "pre",
                                                         activation=activation)
    dec = spec.decoder
    dec.embeddings.weight = _np(model.embed.weight)
    dec.scale_embeddings = cfg.scale_embeddings
    dec.position_encodings.encodings = _positions(model.pos)
    if cfg.norm == "pre":
        _norm(dec.layer_norm, model.norm)
    for layer_spec, layer in zip(dec.layer, model.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.norm1)
        _ffn(layer_spec.ffn, layer.ff, layer.ff_norm)
    _output(spec, dec, model)
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


def tokenizer_sha256(folder: Path | str) -> str:
    """One SHA-256 over a tokenizer folder's files (names and contents, in name order); "" when it has none."""
    folder = Path(folder)
    if not folder.is_dir():
        return ""
    files = sorted(f for f in folder.iterdir() if f.is_file())
    if not files:
        return ""
    return hashlib.sha256("".join(f"{f.name}\0{file_sha256(f)}\n" for f in files).encode()).hexdigest()


def export_source(run_dir: Path | str, checkpoint: str = "best") -> dict:
    """What an export of a run is made from: the checkpoint file `checkpoint` ("best" or "last") resolves to now,
    its SHA-256 and the tokenizer's (`tokenizer_sha256`). An export records it in MANIFEST; a reuse compares it."""
    path = resolve_checkpoint(run_dir, checkpoint)
    if not path.is_file():
        raise AttnlabError(f"{path}: no such checkpoint")
    return {"checkpoint": checkpoint, "checkpoint_file": path.name, "checkpoint_sha256": file_sha256(path),
            "tokenizer_sha256": tokenizer_sha256(Path(run_dir) / "tokenizer")}


def check_export_folder(out: Path, own: bool = True) -> None:
    """Refuses, naming it, an export folder that attnlab must not replace (`check_replaceable_folder`): the
    current folder, a symlink, a file, or a folder holding anything that is not part of a CTranslate2 export;
    unless `own` (the run's own export folder, `ctranslate2_dir`, which a killed export can leave without it),
    a folder with files but no MANIFEST: a CTranslate2 model that another tool made."""
    check_replaceable_folder(out, EXPORT_NAME.fullmatch, "part of a CTranslate2 export", None if own else MANIFEST)


def check_exportable(run: LoadedRun) -> None:
    """Refuses, naming the families that can, a run whose family CTranslate2 does not run (an RNN
    encoder-decoder): before `export_ctranslate2` and `translate --engine ctranslate2`."""
    if run.family.export not in EXPORTS:
        can = titles([f for f in FAMILIES if f.export in EXPORTS])
        raise AttnlabError(f"{run.run_dir}: {run.family.title} runs cannot be exported to CTranslate2 nor run by "
                           f"it; {can} runs can")


def export_ctranslate2(run: LoadedRun, out: Path | str | None = None, quantization: str = "float32",
                       source: dict | None = None) -> Path:
    """Writes the CTranslate2 model of a loaded Transformer translation run (for `ctranslate2.Translator`) or
    language-model run (for `ctranslate2.Generator`) to `out` (default `ctranslate2_dir`); returns the directory.
    The weights are quantized as asked (int8: 8-bit weights, float32 compute). `attnlab.runs.workflow.export_run`
    loads the run and calls this.

    The export is written like a checkpoint: everything goes into a new private folder beside `out` (CTranslate2
    writes model.bin itself), then MANIFEST with what it was made from (`source`, default `export_source` of the
    run now) and every file's size and SHA-256, then the folder is renamed to `out` (`replace_folder`): a kill
    leaves the old export or none, never a truncated model.bin, and no file is written through a link."""
    ct2 = _ct2()
    run_dir = run.run_dir
    if quantization not in QUANTIZATIONS:
        raise AttnlabError(f"--quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    check_exportable(run)
    default = ctranslate2_dir(run_dir, run.checkpoint, quantization)
    out = Path(out) if out is not None else default
    check_export_folder(out, own=out.resolve() == default.resolve())
    source = source if source is not None else export_source(run_dir, run.checkpoint)
    if run.family.export == "generator":
        spec = language_model_spec(run.model, vocabulary(run.tokenizers.tgt))
    else:
        spec = transformer_spec(run.model, vocabulary(run.tokenizers.src), vocabulary(run.tokenizers.tgt))
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    make_dirs(out.parent)
    staging = new_folder(out.parent, out.name)
    try:
        spec.save(str(staging))
        for f in sorted((run_dir / "tokenizer").iterdir()):  # the SentencePiece models, to tokenize without attnlab
            if f.is_file():
                atomic_write_bytes(staging / "tokenizer" / f.name, f.read_bytes(), staging)
        write_json(staging / MANIFEST, {**source, "run": str(run_dir.resolve()), "quantization": quantization,
                                        "ctranslate2": ct2.__version__, "family": run.family.name,
                                        "max_len": run.model.cfg.max_len, "files": export_files(staging)}, staging)
        replace_folder(staging, out)
    except BaseException:  # Ctrl-C included: the half-made folder goes
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("exported %s (%s) to %s", run_dir, quantization, out)
    return out


def export_files(model_dir: Path) -> dict[str, dict]:
    """{relative path: {"size", "sha256"}} of the files of an export folder (its MANIFEST and temporary files
    excepted); a symlink in it, or something that is neither a file nor a folder, is an AttnlabError naming it."""
    files = {}
    for path in sorted(model_dir.rglob("*")):
        rel = path.relative_to(model_dir).as_posix()
        if rel == MANIFEST or path.name.startswith("."):
            continue
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise AttnlabError(f"{path}: is a symlink; an export holds only its own files")
        if stat.S_ISREG(mode):
            files[rel] = {"size": os.lstat(path).st_size, "sha256": file_sha256(path)}
        elif not stat.S_ISDIR(mode):
            raise AttnlabError(f"{path}: is neither a file nor a folder")
    return files


def check_export(model_dir: Path | str, tokenizers: TokenizerPair, source: dict | None = None,
                 written: dict | None = None) -> None:
    """Checks a CTranslate2 translation export before it is loaded; any disagreement is an AttnlabError naming the
    file:

    - MANIFEST (when there is one; required with `source`): every file is there with the size and SHA-256
      recorded, and none is added (a truncated, zeroed or flipped model.bin, an export cut short);
    - `source` (a reuse of a run's own export): made from the checkpoint and tokenizer `export_source` names now;
    - config.json: attnlab's special tokens, decoding starts from <s>, no BOS/EOS added to the source (attnlab
      adds its EOS), a LayerNorm epsilon in (0, 1) (the limit of `attnlab.nn.transformer.TransformerConfig`) and,
      with `written` (`written_config` of the run's model), exactly the values attnlab writes for that model;
    - the vocabularies: exactly the run's tokenizers' pieces in id order (size, specials, order, names).

    model.bin itself is checked by loading it (`attnlab.decode.translate.CTranslate2Translator`)."""
    model_dir = Path(model_dir)
    if os.path.islink(model_dir):
        raise AttnlabError(f"{model_dir}: is a symlink; attnlab never reads or writes an export through a link")
    if not (model_dir / "model.bin").is_file():
        raise AttnlabError(f"{model_dir}: not a CTranslate2 model directory (model.bin missing); create it with "
                           "attnlab export RUN_DIR --to ctranslate2")
    manifest = read_manifest(model_dir, required=source is not None)
    if manifest is not None:
        check_files(model_dir, manifest)
    if source is not None:
        if manifest.get("checkpoint_sha256") != source["checkpoint_sha256"]:
            raise AttnlabError(f"{model_dir / MANIFEST}: exported from another checkpoint than the run's "
                               f"{source['checkpoint']} one now ({source['checkpoint_file']})")
        if manifest.get("tokenizer_sha256") != source["tokenizer_sha256"]:
            raise AttnlabError(f"{model_dir / MANIFEST}: exported with another tokenizer than the run's")
    check_config(model_dir / "config.json", written or {})
    src, tgt = vocabulary(tokenizers.src), vocabulary(tokenizers.tgt)
    if (model_dir / "shared_vocabulary.json").is_file() or (model_dir / "shared_vocabulary.txt").is_file():
        if src != tgt:
            raise AttnlabError(f"{model_dir}: one shared vocabulary, but the run's source and target tokenizers "
                               "differ")
        check_vocabulary(model_dir, "shared_vocabulary", tgt)
    else:
        check_vocabulary(model_dir, "source_vocabulary", src)
        check_vocabulary(model_dir, "target_vocabulary", tgt)


def read_manifest(model_dir: Path, required: bool) -> dict | None:
    """The export's MANIFEST with its file list, or None when it has none (an export of another tool or of an
    older attnlab) and `required` is false."""
    path = model_dir / MANIFEST
    if not os.path.lexists(path):
        if required:
            raise AttnlabError(f"{path}: missing (an export cut short or made by an older attnlab)")
        return None
    manifest = read_json(path)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        if required or isinstance(manifest, dict) and "files" in manifest:
            raise AttnlabError(f"{path}: expected a JSON object with the key files (made by an older attnlab?)")
        return None
    return manifest


def check_files(model_dir: Path, manifest: dict) -> None:
    """Every file of the export has the size and SHA-256 its MANIFEST records, and no file is missing or added."""
    recorded, present = manifest["files"], export_files(model_dir)
    for rel in sorted(set(recorded) | set(present)):
        if rel not in present:
            raise AttnlabError(f"{model_dir / rel}: missing (the export's {MANIFEST} lists it)")
        if rel not in recorded:
            raise AttnlabError(f"{model_dir / rel}: not part of the export ({MANIFEST} does not list it)")
        if recorded[rel] != present[rel]:
            size = present[rel]["size"]
            raise AttnlabError(f"{model_dir / rel}: changed since the export ({size:,} bytes, a SHA-256 other than "
                               f"the one {MANIFEST} records); export the run again")


def check_config(path: Path, written: dict) -> None:
    """config.json of a translation export: attnlab's special tokens, no source BOS/EOS, a sane epsilon, and the
    `written` values exactly."""
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise AttnlabError(f"{path}: expected a JSON object")
    expected = {"decoder_start_token": SPECIALS[1], "bos_token": SPECIALS[1], "eos_token": SPECIALS[2],
                "unk_token": SPECIALS[3]}
    for key, value in expected.items():
        if cfg.get(key, value) != value:
            raise AttnlabError(f"{path}: {key} is {cfg[key]!r}; an attnlab model needs {value!r}")
    for key in ("add_source_bos", "add_source_eos"):
        if cfg.get(key, False) is not False:
            raise AttnlabError(f"{path}: {key} must be false (attnlab adds the source's EOS itself)")
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise AttnlabError(f"{path}: layer_norm_epsilon is {eps!r}; it must be a number in (0, 1)")
    for key, value in written.items():
        if cfg.get(key) != value:
            raise AttnlabError(f"{path}: {key} is {cfg.get(key)!r}, but attnlab writes {value!r} for this run's "
                               "model; export the run again")


def check_vocabulary(model_dir: Path, stem: str, pieces: list[str]) -> None:
    """The vocabulary file `stem`.json (or CTranslate2 2.x's `stem`.txt) holds exactly `pieces`, in order."""
    path = model_dir / f"{stem}.json"
    if path.is_file():
        tokens = read_json(path)
    elif (model_dir / f"{stem}.txt").is_file():
        path = model_dir / f"{stem}.txt"
        tokens = read_lines(path)
    else:
        raise AttnlabError(f"{path}: missing")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise AttnlabError(f"{path}: expected a list of tokens")
    if tokens != pieces:
        if len(tokens) != len(pieces):
            raise AttnlabError(f"{path}: {len(tokens)} tokens, the run's tokenizer has {len(pieces)}")
        i = next(i for i, (a, b) in enumerate(zip(tokens, pieces)) if a != b)
        raise AttnlabError(f"{path}: token {i} is {tokens[i]!r}, the run's tokenizer has {pieces[i]!r} (the "
                           "vocabulary must be the tokenizer's pieces in id order)")
