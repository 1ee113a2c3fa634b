"""The decoder-only Transformer language model (GPT-style): training, perplexity, sampling, its explorer hooks
(the causal self-attention of a prompt and its continuation), and the weights a translation decoder can start from
(transfer learning, `init_decoder_from_lm`).

The model is the Transformer's own decoder stack without cross-attention (`attnlab.nn.transformer.DecoderLayer` with
cross_attention=False: causal self-attention, position t sees 0..t, and the FFN), token embeddings scaled by
sqrt(D) plus positions, a final LayerNorm for pre-norm, and an output layer tied to the embeddings by default.
Text is one sentence (verse, line) per example: the model reads [BOS] + tokens and
predicts tokens + [EOS], so perplexity covers the end of the sentence too.

Generation keeps a key/value cache per layer (`attnlab.nn.lm.TransformerLM.step`, the decoder's one cached step
`attnlab.nn.transformer.decoder_step`), so each new token costs O(t), and samples with
temperature, top-k and top-p (nucleus) filtering (`attnlab.decode.sampling`: `generate`, `filter_logits`,
`sample_next`).

GPT-2 (Radford et al. 2019) is one setting of this model, which `attnlab import` gives a GPT-2-class folder:
learned positions, no sqrt(D) embedding scale (`scale_embeddings = false`), pre-norm with the final LayerNorm, the
tanh GELU (`activation = "gelu_tanh"`), biases, the output layer tied to the embeddings (plus an output bias
`generator_bias` where the import adds rows GPT-2 has not: `attnlab.interop.gpt2`).

Data: one side of the Bible corpus (`data.corpus = "bible"`, `data.side = "tgt"` for the Spanish verses) or plain
text files, one sentence per line (`data.corpus = "text"`).

Shape legend: B batch, T tokens, t tokens so far, D d_model, H heads, Dh head dim, N layers, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.core.config import MAX_COUNT, MAX_LEN, MAX_SEED, MAX_VOCAB, from_dict, load_config, to_dict
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import write_json
from attnlab.data.batching import pack_rows, pad_sequences
from attnlab.data.corpus import normalize
from attnlab.data.prepare import prepare
from attnlab.data.spec import StoreSpec
from attnlab.data.store import Store, StoreDataset
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, TokenizerConfig, TokenizerPair
# Sample, filter_logits and sample_next are re-exported: the LM's sampling, named where the LM is
from attnlab.decode.sampling import check_sampling, generate
from attnlab.families.base import EvalOptions, ExplorerFacts, LoadedRun, model_family
from attnlab.families.explorer import (AttentionMap, Recording, capture, scheme_of, stacked_qk, token_choices,
                                       with_rollout)
from attnlab.nn.attention import Segments
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import TransformerSeq2Seq
from attnlab.training.trainer import TrainConfig, Training, check_sentence_budget, sequence_loss, summed_loss

log = logging.getLogger("attnlab")


# ---------------------------------------------------------------------------------------------- config
@dataclass
class LMDataConfig:
    """corpus = "bible": one side of the translation corpus (side "src" = English, "tgt" = Spanish), its fixed
    train/dev/test split; corpus = "text": plain UTF-8 files, one sentence per line (empty lines skipped); without
    dev/test files, dev_size and test_size lines are held out at random (seeded). Read once into a prepared
    monolingual store (`lm_store_spec`), as a translation corpus is."""

    corpus: str = "bible"
    side: str = "tgt"
    english: str = "kjv"
    train: str = ""
    dev: str = ""
    test: str = ""
    dev_size: int = 500
    test_size: int = 500
    max_train_sentences: int = 0  # a seeded random subset of the training sentences (0: all)
    subset_seed: int = 0
    skip_bad_lines: bool = False  # a line not UTF-8 or too long: skipped and counted (else an error naming file:line)
    store: str = ""  # the prepared text's folder ("": the cache, cache_dir()/stores/NAME-KEY; `attnlab data prepare`)

    CHOICES: ClassVar[dict] = {"corpus": ("bible", "text"), "side": ("src", "tgt"), "english": ("kjv", "web")}
    LIMITS: ClassVar[dict] = {"dev_size": (0, MAX_COUNT), "test_size": (0, MAX_COUNT),
                              "max_train_sentences": (0, MAX_COUNT), "subset_seed": (0, MAX_SEED)}


@dataclass
class LMSection:
    family: str = "lm"
    lm: LMModelConfig = field(default_factory=LMModelConfig)

    CHOICES: ClassVar[dict] = {"family": ("lm",)}


@dataclass
class GenerateConfig:
    """Sampling defaults of `attnlab generate` (each overridable on its command line). temperature 0: greedy."""

    max_len: int = 100  # new tokens per sample
    temperature: float = 1.0
    top_k: int = 0  # keep the k most likely tokens (0: all)
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches p (1: all)

    LIMITS: ClassVar[dict] = {"max_len": (1, MAX_LEN), "temperature": (0.0, 100.0), "top_k": (0, MAX_VOCAB),
                              "top_p": (0.0, 1.0)}

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)
        if self.max_len < 1:
            raise AttnlabError(f"max_len must be >= 1, got {self.max_len}")


@dataclass
class LMExperimentConfig:
    """A language-model experiment (configs/*-lm.toml): `[model] family = "lm"` plus `[model.lm]`."""

    data: LMDataConfig = field(default_factory=LMDataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: LMSection = field(default_factory=LMSection)
    train: TrainConfig = field(default_factory=TrainConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)

    def __post_init__(self) -> None:
        check_sentence_budget(self.train)


def is_lm_config(data: dict) -> bool:
    """Whether a raw config dict (file or RUN_DIR/config.json) is a language-model experiment."""
    return model_family(data) == "lm"


def load_lm_config(path: Path | str | None, overrides: list[str] | None = None) -> LMExperimentConfig:
    return load_config(LMExperimentConfig, path, overrides)


def imported_lm_config(lm: dict, tokenizer: dict) -> dict:
    """RUN_DIR/config.json of a language model imported from another toolkit (`attnlab import`,
    `attnlab.interop.gpt2`): the model's settings and its tokenizer's, at most half its positions generated by
    default, everything else the defaults."""
    model = from_dict(LMModelConfig, lm, "model.lm.")
    return to_dict(LMExperimentConfig(tokenizer=from_dict(TokenizerConfig, tokenizer, "tokenizer."),
                                      model=LMSection(lm=model),
                                      generate=GenerateConfig(max_len=min(GenerateConfig.max_len,
                                                                          max(1, model.max_len // 2)))))


# ---------------------------------------------------------------------------------------------- data
class LMDataset(torch.utils.data.Dataset):
    """Sentences as token ids without BOS/EOS: item i is (i, ids of sentence i); lengths() = len + 1 (BOS or EOS).
    Made from the `StoreDataset` of a monolingual store (its targets, read from its files, nothing per sentence in
    the Python heap: the training split) or from a list of id lists (the dev split)."""

    def __init__(self, ids: list[list[int]] | StoreDataset) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[int, list[int]]:
        if isinstance(self.ids, StoreDataset):
            return index, self.ids[index][2]
        return index, self.ids[index]

    def lengths(self) -> np.ndarray | list[int]:
        if isinstance(self.ids, StoreDataset):
            return self.ids.lengths()[:, 1]
        return [len(s) + 1 for s in self.ids]


@dataclass
class LMBatch:
    """inputs = [BOS] + ids, targets = ids + [EOS], right-padded with PAD_ID. Shape: (B, T) each; segments
    (B, T) for packed rows (several sentences per row, `LMTask.collate_packed`). num_targets: the targets that are
    not padding, counted when collating, so the loss never reads it back from the device."""

    inputs: Tensor
    targets: Tensor
    segments: Segments | None = None
    num_targets: int = 0

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LMBatch:
        return LMBatch(self.inputs.to(device, non_blocking=non_blocking),
                       self.targets.to(device, non_blocking=non_blocking),
                       None if self.segments is None else self.segments.to(device, non_blocking=non_blocking),
                       self.num_targets)


@dataclass
class LMTask:
    """Next-token prediction for the trainer: loss summed over non-pad target tokens (EOS included). fused_loss
    (`train.fused_loss`): the model computes the loss with its output layer, never the whole logits."""

    fused_loss: bool = False
    perplexity: ClassVar[bool] = True

    @staticmethod
    def collate(examples: list[tuple[int, list[int]]]) -> LMBatch:
        return LMBatch(pad_sequences([[BOS_ID] + list(s) for _, s in examples]),
                       pad_sequences([list(s) + [EOS_ID] for _, s in examples]), None,
                       sum(len(s) + 1 for _, s in examples))

    @staticmethod
    def collate_packed(examples: list[tuple[int, list[int]]], row_len: int) -> LMBatch:
        """Sentences packed first-fit into rows of at most row_len tokens (`attnlab.data.batching.RowPacker`)."""
        rows = pack_rows([(len(s) + 1,) for _, s in examples], row_len)
        return LMBatch(pad_sequences([[t for k in row for t in [BOS_ID, *examples[k][1]]] for row in rows]),
                       pad_sequences([[t for k in row for t in [*examples[k][1], EOS_ID]] for row in rows]),
                       Segments.of_rows([[len(examples[k][1]) + 1 for k in row] for row in rows]),
                       sum(len(s) + 1 for _, s in examples))

    def loss(self, model: nn.Module, batch: LMBatch, label_smoothing: float) -> tuple[Tensor, int]:
        packed = {} if batch.segments is None else {"segments": batch.segments}
        if self.fused_loss:
            return model(batch.inputs, **packed, targets=batch.targets,
                         label_smoothing=label_smoothing), batch.num_targets
        logits = model(batch.inputs, **packed)  # (B, T, V)
        return sequence_loss(logits, batch.targets, label_smoothing), batch.num_targets


def lm_store_spec(cfg: LMExperimentConfig) -> StoreSpec:
    """The monolingual store of the config's data (`attnlab.data.spec.StoreSpec`): one side of the Bible, or text
    files of one sentence per line (without dev/test files, data.dev_size and data.test_size lines held out at
    random, seed 0), its training subset (data.max_train_sentences), and one tokenizer trained on the sentences."""
    d = cfg.data
    tokenizer = dataclasses.replace(cfg.tokenizer, joint=True)
    subset = {"max_train_pairs": d.max_train_sentences, "subset_seed": d.subset_seed, "tokenizer": tokenizer,
              "skip_bad_lines": d.skip_bad_lines}
    if d.corpus == "bible":
        return StoreSpec(corpus="bible", english=[d.english], monolingual=d.side, **subset)
    if not d.train:
        raise AttnlabError("data.train: give a text file (one sentence per line) for corpus = 'text'")
    if bool(d.dev) != bool(d.test):
        raise AttnlabError("data.dev and data.test: give both files, or neither (then lines are held out)")
    return StoreSpec(corpus="files", train=[d.train], dev=[d.dev] if d.dev else [], test=[d.test] if d.test else [],
                     dev_size=d.dev_size, test_size=d.test_size, monolingual="lines", **subset)


def load_lm_data(cfg: LMExperimentConfig, tokenizers: TokenizerPair | None = None, out: Path | None = None,
                 force: bool = False) -> Store:
    """The prepared store of the LM's text (`lm_store_spec`) in `out` (None: data.store, else the cache), reused
    when prepared before, built again if force (a damaged store); a resumed run hands in its own tokenizer."""
    return prepare(lm_store_spec(cfg), out or cfg.data.store or None, tokenizers, force=force)


def split_sentences(store: Store, split: str) -> list[str]:
    """The sentences of a dev or test split (a monolingual store keeps each as its pair's target)."""
    return [p.tgt for p in store.pairs(split)]


# ---------------------------------------------------------------------------------------------- family
# The rows of the language-model family in `attnlab.families.table`: what the one run pipeline (`attnlab.runs.workflow`)
# calls to train, evaluate and summarise an LM run.
def make_lm_tokenizers(cfg: LMExperimentConfig, store: Store) -> TokenizerPair:
    """The one tokenizer the store trained on the training sentences (a joint pair: the LM reads `.tgt`)."""
    return store.tokenizers()


def build_lm(cfg: LMExperimentConfig, tokenizers: TokenizerPair | None) -> TransformerLM:
    vocab = tokenizers.tgt.vocab_size if tokenizers is not None else summary_vocab(cfg.tokenizer)
    return TransformerLM(vocab, cfg.model.lm, pad_id=PAD_ID)


def summary_vocab(cfg: TokenizerConfig) -> int:
    """The vocabulary size a config's model is built with before any tokenizer is trained (`attnlab summary`)."""
    return cfg.vocab_size if cfg.kind != "char" else 100


def lm_training(cfg: LMExperimentConfig, store: Store, tokenizers: TokenizerPair, model: TransformerLM
                ) -> Training:
    """Next-token prediction on the store's training sentences; model selection on dev loss (perplexity)."""
    if tokenizers is None:  # a resumed run whose tokenizer folder is gone
        raise AttnlabError("a language-model run needs its tokenizer (RUN_DIR/tokenizer is missing)")
    tok = tokenizers.tgt
    train = LMDataset(store.train_data())
    dev = split_sentences(store, "dev")
    if not len(train) or not dev:
        raise AttnlabError("data: the train and dev splits need at least one sentence each")
    too_long = int(train.lengths().max())
    if too_long > cfg.model.lm.max_len:
        raise AttnlabError(f"model.lm.max_len ({cfg.model.lm.max_len}) is shorter than the longest training "
                           f"sentence ({too_long} tokens with BOS)")
    return Training(LMTask(cfg.train.fused_loss), train, LMDataset([tok.encode(s) for s in dev]),
                    dev_eval=None, d_model=cfg.model.lm.d_model,
                    sizes=f"train sentences {len(train):,} (prepared store {store.path}), dev {len(dev):,}")


def lm_summary_inputs(cfg: LMExperimentConfig, tokenizers: TokenizerPair | None, src_len: int, tgt_len: int
                      ) -> tuple[tuple[Tensor, ...], str]:
    """A dummy batch of two sentences of tgt_len tokens for `attnlab summary`, and its description."""
    vocab = tokenizers.tgt.vocab_size if tokenizers is not None else summary_vocab(cfg.tokenizer)
    return (torch.randint(4, vocab, (2, tgt_len)),), f"vocab {vocab:,}; dummy batch B=2, T={tgt_len}"


@torch.no_grad()
def sentence_nll(model: TransformerLM, ids: list[list[int]], max_tokens: int = 4096,
                 device: torch.device | str = "cpu") -> tuple[float, int]:
    """Summed negative log-likelihood (nats) of the sentences, EOS included, and the number of predicted tokens;
    batched by the trainer's token-budget sampler."""
    return summed_loss(model, LMTask(), LMDataset(ids), max_tokens, torch.device(device))


def evaluate_lm(run: LoadedRun, split: str, options: EvalOptions) -> dict:
    """Perplexity of a split per token (of this run's tokenizer) and per word (whitespace words + EOS, comparable
    across tokenizers); writes RUN_DIR/eval/<split>.json."""
    cfg, tok = run.cfg, run.tokenizers.tgt
    if split not in ("dev", "test"):
        raise AttnlabError(f"unknown split {split!r}; choose dev or test")
    sentences = split_sentences(load_lm_data(cfg, run.tokenizers), split)
    if not sentences:  # (a text corpus with data.{split}_size = 0 and no {split} file): no perplexity to give
        raise AttnlabError(f"the {split} split of this run's corpus is empty; evaluate another split (--split)")
    nll, ntok = sentence_nll(run.model, [tok.encode(s) for s in sentences], cfg.train.max_tokens, run.device)
    nwords = sum(len(s.split()) + 1 for s in sentences)
    per_token, per_word = nll / max(ntok, 1), nll / max(nwords, 1)
    result = {"split": split, "sentences": len(sentences), "checkpoint": run.checkpoint, "tokens": ntok,
              "words": nwords, "nll_per_token": per_token, "ppl_token": math.exp(min(per_token, 50.0)),
              "ppl_word": math.exp(min(per_word, 50.0))}
    write_json(run.run_dir / "eval" / f"{split}.json", result)
    return result


def format_lm_eval(result: dict) -> str:
    return (f"{result['split']}: {result['sentences']:,} sentences, {result['tokens']:,} tokens (EOS included): "
            f"perplexity {result['ppl_token']:.2f} per token, {result['ppl_word']:.2f} per word "
            f"({result['words'] - result['sentences']:,} words + {result['sentences']:,} EOS)")


# ---------------------------------------------------------------------------------------------- explorer
@torch.no_grad()
def explore_generation(run: LoadedRun, prompt: str, sentence_b: str | None = None, beam: int | None = None,
                       max_new: int = 40, translator=None) -> Recording:
    """The causal self-attention of a language model over [BOS] + prompt (it may be empty) + its greedy
    continuation (at most max_new tokens), its rollout, and every token's probability with the top 5 alternatives.
    The explore hook (`attnlab.families.base.Explorer`): sentence_b, beam and translator do not apply."""
    model, tok = run.model, run.tokenizers.tgt
    sample = generate(model, tok, prompt, num=1, max_len=max_new, temperature=0.0, device=run.device)[0]
    prompt_ids = tok.encode(normalize(prompt))
    ids = [BOS_ID, *prompt_ids, *sample.tokens]  # the model's input; EOS is predicted, never fed
    targets = ids[1:] + ([EOS_ID] if sample.finished else [])
    tokens = torch.tensor([ids], device=run.device)  # (1, T)
    with capture([l.self_attn for l in model.layers]) as cap:
        weights = model.attention_maps(tokens)[0].float().cpu()  # (N, H, T, T)
        q, k, scale = stacked_qk(cap, range(len(model.layers)))
    pieces = [tok.id_to_piece(i) for i in ids]
    maps = {"lm_self": AttentionMap("lm_self", "causal self-attention", weights, pieces, pieces, True, q.cpu(),
                                    k.cpu(), scale)}
    with_rollout(maps, "lm_self")
    log_probs = model(tokens)[0].log_softmax(-1).cpu()[: len(targets)]  # (T, V)
    generated = [t > len(prompt_ids) for t in range(1, len(targets) + 1)]
    return Recording(family="lm", output=sample.text, maps=maps, scheme=scheme_of(tok), score=sample.logprob,
                     choices=token_choices(log_probs, targets, tok.id_to_piece, generated, tok.control_ids))


def lm_explorer_facts(run: LoadedRun) -> ExplorerFacts:
    """The layers of causal self-attention; a prompt and its continuation hold at most model.lm.max_len tokens."""
    m = run.cfg.model.lm
    return ExplorerFacts(run.family.name, "generation", "causal self-attention",
                         f"causal self-attention ({m.layers} layers x {m.h} heads)", m.layers, m.h, 1, m.max_len)


def lm_tokens(run: LoadedRun, sentence: str, sentence_b: str | None, max_new: int) -> int:
    """The prompt's tokens and max_new; with [BOS] more than model.lm.max_len is an AttnlabError."""
    tokens, limit = len(run.tokenizers.tgt.encode(sentence)) + max_new, run.cfg.model.lm.max_len
    if tokens + 1 > limit:
        raise AttnlabError(f"prompt + max_new ({tokens} tokens) exceed the model's max_len ({limit})")
    return tokens


# ---------------------------------------------------------------------------------------------- transfer
def lm_decoder_state(lm_state: dict[str, Tensor], dec_layers: int) -> dict[str, Tensor]:
    """The translation-decoder weights an LM state dict provides, under `TransformerSeq2Seq` names: embeddings,
    learned positions, each layer's self-attention, FFN and their LayerNorms (LM norm1 -> decoder norm1, LM norm2
    -> decoder norm3: the FFN's), the final LayerNorm and the output layer. Cross-attention (and its norm2) has no
    counterpart and keeps its fresh initialization."""
    out = {}
    for name, t in lm_state.items():
        if name.startswith("layers."):
            _, i, rest = name.split(".", 2)
            if int(i) >= dec_layers:
                continue
            rest = "norm3" + rest[len("norm2"):] if rest.startswith("norm2") else rest
            out[f"decoder.{i}.{rest}"] = t
        elif name.startswith("embed."):
            out["tgt_embed." + name[len("embed."):]] = t
        elif name.startswith("pos."):
            out["tgt_pos." + name[len("pos."):]] = t
        elif name.startswith("norm."):
            out["dec_norm." + name[len("norm."):]] = t
        elif name.startswith("generator."):
            out[name] = t
    return out


def init_decoder_from_lm(model: nn.Module, lm_run: LoadedRun) -> int:
    """Copies a trained LM run's weights (`attnlab.runs.workflow.load_run(..., ability="generate")`) into the decoder
    of a Transformer translation model (transfer learning); returns the number of parameters copied. The LM
    must match the decoder: d_model, heads, d_ff, norm placement, activation, positions and vocabulary (the
    translation run uses the LM's tokenizer as its target tokenizer); the LM needs at least as many layers as the
    decoder."""
    if not isinstance(model, TransformerSeq2Seq):
        raise AttnlabError("pretrained.decoder needs model.family = 'transformer'")
    cfg, tok, lm = lm_run.cfg, lm_run.tokenizers.tgt, lm_run.model
    mine, theirs = model.cfg, cfg.model.lm
    if not theirs.scale_embeddings:
        raise AttnlabError("pretrained.decoder: the LM's model.lm.scale_embeddings is false; a translation decoder "
                           "scales its embeddings by sqrt(d_model)")
    for key in ("d_model", "h", "d_ff", "norm", "activation", "positions", "bias", "generator_bias"):
        if getattr(mine, key) != getattr(theirs, key):
            raise AttnlabError(f"pretrained.decoder: the LM's model.lm.{key} ({getattr(theirs, key)!r}) differs from "
                               f"model.transformer.{key} ({getattr(mine, key)!r})")
    if theirs.layers < mine.dec_layers:
        raise AttnlabError(f"pretrained.decoder: the LM has {theirs.layers} layers, the decoder {mine.dec_layers}")
    if model.tgt_embed.num_embeddings != tok.vocab_size:
        raise AttnlabError(f"pretrained.decoder: target vocabulary {model.tgt_embed.num_embeddings} != the LM's "
                           f"{tok.vocab_size}")
    if mine.tie_embeddings == "all":
        raise AttnlabError("pretrained.decoder: model.transformer.tie_embeddings = 'all' would overwrite the source "
                           "embeddings with the LM's; use 'decoder' or 'none' (and tokenizer.joint = false)")
    if theirs.tie_embeddings != (mine.tie_embeddings == "decoder"):
        raise AttnlabError(f"pretrained.decoder: the LM's model.lm.tie_embeddings ({theirs.tie_embeddings}) does not "
                           f"match model.transformer.tie_embeddings ({mine.tie_embeddings!r}; 'decoder' = tied)")
    own = model.state_dict()
    copied = {k: v for k, v in lm_decoder_state(lm.state_dict(), mine.dec_layers).items() if k in own}
    model.load_state_dict(copied, strict=False)
    return sum({own[k].data_ptr(): own[k].numel() for k in copied}.values())  # tied tensors once
