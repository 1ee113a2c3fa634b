"""Sentence-pair classification (the paraphrase family): a classifier is model(a, a_mask, b, b_mask) -> logits
(B, C), trained with the one trainer on tokenized pairs.

- Batches, dataset, task and prediction: `PairBatch`, `PairDataset`, `PairTask` (cross-entropy summed over pairs),
  `predict_pairs`, `pair_accuracy`.
- The experiment (`ParaphraseConfig`, configs/paraphrase-*.toml): the model family "decomposable"
  (`attnlab.nn.decomposable`, Parikh et al. 2016, with a subword tokenizer trained on the train pairs) or "minilm"
  (`attnlab.families.minilm.build_minilm_classifier`, the fine-tuned all-MiniLM-L6-v2 and its WordPiece tokenizer), on
  the KJV-vs-WEB verse pairs of `attnlab.data.paraphrase`; and the functions the run pipeline (`attnlab.runs.workflow`)
  calls for it (see `attnlab.families.table`), and its explorer hooks (the soft alignments or the self-attention of
  each sentence).

Shape legend: B batch, La / Lb lengths of the two sentences, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.config import MAX_COUNT, MAX_SEED, load_config
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, write_json
from attnlab.core.plotting import plot_attention
from attnlab.data.batching import TokenBudgetBatchSampler, pad_with_mask
from attnlab.data.corpus import normalize, subsample
from attnlab.data.paraphrase import HARD_NEGATIVES, KINDS, ParaphraseCorpus, ParaphrasePair, paraphrase_corpus
from attnlab.data.tokenizers import PAD_ID, TokenizerConfig, TokenizerPair, build_tokenizers
from attnlab.families.base import EvalOptions, ExplorerFacts, LoadedRun
from attnlab.families.explorer import (AttentionMap, Recording, capture, encoder_self_attention, scheme_of, stacked_qk,
                                       with_rollout)
from attnlab.families.minilm import MiniLMConfig, WordPieceTokenizer, build_minilm_classifier, minilm_dir
from attnlab.nn.bert import BertEncoder
from attnlab.nn.decomposable import DecomposableAttention, DecomposableConfig
from attnlab.training.trainer import TrainConfig, Training

MAX_SERVED_TOKENS = 256  # tokens per sentence of a pair the explorer takes from a decomposable run (it has no
# limit of its own)


# ---------------------------------------------------------------------------------------------- batches
@dataclass
class PairBatch:
    """Padded token ids of both sides (B, La), (B, Lb), masks (True at real tokens), labels (B,)."""

    a: Tensor
    a_mask: Tensor
    b: Tensor
    b_mask: Tensor
    labels: Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PairBatch:
        return PairBatch(*(t.to(device, non_blocking=non_blocking) for t in
                           (self.a, self.a_mask, self.b, self.b_mask, self.labels)))


class PairDataset(torch.utils.data.Dataset):
    """Tokenized sentence pairs with labels; `lengths()` is the longer side, the cost of a pair's row."""

    def __init__(self, pairs: Sequence, tokenizer) -> None:
        """pairs: objects with .a, .b (str) and .label (int), e.g. `attnlab.data.paraphrase.ParaphrasePair`;
        tokenizer: `ids(sentences) -> list[list[int]]` and `pad_id`."""
        self.a = tokenizer.ids([p.a for p in pairs])
        self.b = tokenizer.ids([p.b for p in pairs])
        self.labels = [int(p.label) for p in pairs]
        self.pad_id = tokenizer.pad_id

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], int]:
        return self.a[i], self.b[i], self.labels[i]

    def lengths(self) -> list[int]:
        return [max(len(a), len(b)) for a, b in zip(self.a, self.b)]


class PairTask:
    """The trainer's `Task` for sentence-pair classification: cross-entropy summed over pairs."""

    perplexity = False

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = pad_id

    def collate(self, examples: list[tuple[list[int], list[int], int]]) -> PairBatch:
        a, a_mask = pad_with_mask([e[0] for e in examples], self.pad_id)
        b, b_mask = pad_with_mask([e[1] for e in examples], self.pad_id)
        return PairBatch(a, a_mask, b, b_mask, torch.tensor([e[2] for e in examples]))

    @staticmethod
    def loss(model: nn.Module, batch: PairBatch, label_smoothing: float) -> tuple[Tensor, int]:
        logits = model(batch.a, batch.a_mask, batch.b, batch.b_mask)  # (B, C)
        loss = F.cross_entropy(logits.float(), batch.labels, label_smoothing=label_smoothing, reduction="sum")
        return loss, batch.labels.numel()


@torch.no_grad()
def predict_pairs(model: nn.Module, data: PairDataset, max_tokens: int = 2048) -> Tensor:
    """Predicted class of every pair of `data`, in dataset order: (N,) long."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    task = PairTask(data.pad_id)
    preds = torch.empty(len(data), dtype=torch.long)
    for idx in TokenBudgetBatchSampler(data.lengths(), max_tokens, shuffle=False):
        b = task.collate([data[i] for i in idx]).to(device)
        preds[idx] = model(b.a, b.a_mask, b.b, b.b_mask).argmax(-1).cpu()
    model.train(was_training)
    return preds


def pair_accuracy(model: nn.Module, data: PairDataset, max_tokens: int = 2048) -> float:
    """Fraction of pairs of `data` whose predicted class is the label."""
    return (predict_pairs(model, data, max_tokens) == torch.tensor(data.labels)).float().mean().item()


def accuracy_by_kind(pairs: list[ParaphrasePair], preds: Tensor) -> dict:
    """accuracy over all pairs and per kind ("same": positives, "chapter": hard, "random": easy negatives),
    with the counts; preds (N,) in the order of pairs."""
    correct = [int(y) == p.label for y, p in zip(preds.tolist(), pairs)]
    out: dict = {"accuracy": sum(correct) / max(len(pairs), 1), "pairs": len(pairs)}
    for kind in KINDS:
        hits = [c for c, p in zip(correct, pairs) if p.kind == kind]
        out[f"accuracy_{kind}"] = sum(hits) / max(len(hits), 1)
        out[f"pairs_{kind}"] = len(hits)
    return out


# ---------------------------------------------------------------------------------------------- config
@dataclass
class ParaphraseDataConfig:
    seed: int = 0  # seed of the negative pairs
    hard_negatives: str = "random"  # or "overlap": the same-chapter verse sharing the most words with a
    max_train_pairs: int = 0  # a seeded random subset of the training pairs (0: all)
    subset_seed: int = 0

    CHOICES: ClassVar[dict] = {"hard_negatives": HARD_NEGATIVES}
    LIMITS: ClassVar[dict] = {"seed": (0, MAX_SEED), "max_train_pairs": (0, MAX_COUNT), "subset_seed": (0, MAX_SEED)}


@dataclass
class ParaphraseModelConfig:
    """family picks the section that is used: [model.decomposable] or [model.minilm]."""

    family: str = "decomposable"
    decomposable: DecomposableConfig = field(default_factory=DecomposableConfig)
    minilm: MiniLMConfig = field(default_factory=MiniLMConfig)

    CHOICES: ClassVar[dict] = {"family": ("decomposable", "minilm")}


@dataclass
class ParaphraseConfig:
    """A paraphrase experiment (configs/paraphrase-*.toml). [tokenizer] is used by the decomposable family
    only (one tokenizer for both sentences, trained on the train pairs)."""

    data: ParaphraseDataConfig = field(default_factory=ParaphraseDataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ParaphraseModelConfig = field(default_factory=ParaphraseModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def load_paraphrase_config(path: Path | str | None, overrides: list[str] | None = None) -> ParaphraseConfig:
    return load_config(ParaphraseConfig, path, overrides)


def is_paraphrase_config(data: dict) -> bool:
    """Whether a raw config dict (file or RUN_DIR/config.json) is a paraphrase experiment."""
    model = data.get("model")
    if not isinstance(model, dict):
        return False
    family = model.get("family")
    return family in ParaphraseModelConfig.CHOICES["family"] or (
        family is None and ("decomposable" in model or "minilm" in model))


# ---------------------------------------------------------------------------------------------- family
class SubwordIds:
    """An attnlab tokenizer behind the `ids` / `pad_id` interface of `PairDataset`."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.pad_id = tokenizer, PAD_ID

    def ids(self, sentences: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(s) for s in sentences]

    def pieces(self, sentence: str) -> list[str]:
        return self.tokenizer.pieces(sentence)


def load_pairs(cfg: ParaphraseConfig) -> ParaphraseCorpus:
    """The corpus of the config, with the training subset applied (dev and test are never subsampled)."""
    corpus = paraphrase_corpus(cfg.data.seed, hard_negatives=cfg.data.hard_negatives)
    corpus.train = subsample(corpus.train, cfg.data.max_train_pairs, cfg.data.subset_seed)
    return corpus


def make_pair_tokenizers(cfg: ParaphraseConfig, corpus: ParaphraseCorpus) -> TokenizerPair | None:
    """decomposable: one subword tokenizer trained on both sides of the train pairs; minilm: None (the model's
    own WordPiece tokenizer comes with its weights)."""
    if cfg.model.family == "minilm":
        return None
    if not cfg.tokenizer.joint:
        raise AttnlabError("tokenizer.joint must be true for paraphrase pairs: one tokenizer reads both sentences")
    return build_tokenizers(cfg.tokenizer, [p.a for p in corpus.train], [p.b for p in corpus.train])


def pair_ids(cfg: ParaphraseConfig, tokenizers: TokenizerPair | None):
    """The `ids` / `pad_id` object of the config's family (the run's subword tokenizer, or MiniLM's)."""
    if cfg.model.family == "minilm":
        return WordPieceTokenizer(minilm_dir() / "tokenizer.json", cfg.model.minilm.max_len)
    if tokenizers is None:
        raise AttnlabError("the decomposable family needs the run's tokenizer")
    return SubwordIds(tokenizers.src)


def build_pair_model(cfg: ParaphraseConfig, tokenizers: TokenizerPair | None) -> nn.Module:
    """The classifier of the config's family; without tokenizers (`attnlab summary CONFIG`) the decomposable
    model gets tokenizer.vocab_size embeddings."""
    if cfg.model.family == "minilm":
        return build_minilm_classifier(cfg.model.minilm, n_classes=2, seed=cfg.train.seed)[0]
    vocab = tokenizers.src.vocab_size if tokenizers is not None else cfg.tokenizer.vocab_size
    return DecomposableAttention(vocab, cfg.model.decomposable, pad_id=PAD_ID)


def pair_training(cfg: ParaphraseConfig, corpus: ParaphraseCorpus, tokenizers: TokenizerPair | None,
                  model: nn.Module) -> Training:
    """Cross-entropy on the train pairs; model selection on dev accuracy."""
    ids = pair_ids(cfg, tokenizers)
    train_data, dev_data = PairDataset(corpus.train, ids), PairDataset(corpus.dev, ids)

    def dev_eval(m: nn.Module) -> dict:
        by_kind = accuracy_by_kind(corpus.dev, predict_pairs(m, dev_data, cfg.train.max_tokens))
        return {k: v for k, v in by_kind.items() if k.startswith("accuracy")}

    d_model = cfg.model.decomposable.hidden_dim if cfg.model.family == "decomposable" else 384
    return Training(PairTask(ids.pad_id), train_data, dev_data, dev_eval=dev_eval, d_model=d_model,
                    sizes=f"train pairs {len(corpus.train):,}, dev {len(corpus.dev):,}", score_name="accuracy")


def pair_summary_inputs(cfg: ParaphraseConfig, tokenizers: TokenizerPair | None, src_len: int, tgt_len: int
                        ) -> tuple[tuple[Tensor, ...], str]:
    """A dummy batch of two pairs (a of src_len tokens, the second row padded; b of tgt_len tokens)."""
    if cfg.model.family == "minilm":
        vocab = pair_ids(cfg, None).tok.get_vocab_size()
    else:
        vocab = tokenizers.src.vocab_size if tokenizers is not None else cfg.tokenizer.vocab_size
    S, T = src_len, tgt_len
    a, b = torch.randint(4, vocab, (2, S)), torch.randint(4, vocab, (2, T))
    a_mask = torch.arange(S)[None, :] < torch.tensor([S, max(1, S - 2)])[:, None]  # (2, S), second row padded
    b_mask = torch.ones(2, T, dtype=torch.bool)
    description = f"{cfg.model.family} pair classifier, vocab {vocab:,}; dummy pair batch B=2, La={S}, Lb={T}"
    return (a * a_mask, a_mask, b, b_mask), description


def evaluate_pairs(run: LoadedRun, split: str, options: EvalOptions) -> dict:
    """Accuracy of a run on a split, overall and per kind; writes RUN_DIR/eval/paraphrase_<split>.json and the
    misclassified pairs to RUN_DIR/eval/paraphrase_<split>.errors.tsv. options.hard_negatives: evaluate on pairs
    with these hard negatives instead of the run's (files then named paraphrase_<split>-<hard_negatives>.*)."""
    cfg = run.cfg
    name = f"paraphrase_{split}"
    if options.hard_negatives is not None and options.hard_negatives != cfg.data.hard_negatives:
        if options.hard_negatives not in HARD_NEGATIVES:
            raise AttnlabError(f"hard_negatives {options.hard_negatives!r} is not one of {', '.join(HARD_NEGATIVES)}")
        cfg.data.hard_negatives, name = options.hard_negatives, f"{name}-{options.hard_negatives}"
    pairs = load_pairs(cfg).split(split)
    preds = predict_pairs(run.model, PairDataset(pairs, pair_ids(cfg, run.tokenizers)), cfg.train.max_tokens)
    result = {"split": split, "checkpoint": run.checkpoint, "family": cfg.model.family,
              "hard_negatives": cfg.data.hard_negatives, **accuracy_by_kind(pairs, preds)}
    write_json(run.run_dir / "eval" / f"{name}.json", result)
    rows = [f"{p.label}\t{p.kind}\t{p.ref_a}\t{p.ref_b}\t{p.a}\t{p.b}"
            for p, y in zip(pairs, preds.tolist()) if y != p.label]
    atomic_write_text(run.run_dir / "eval" / f"{name}.errors.tsv", "".join(r + "\n" for r in rows))
    return result


def format_pair_eval(result: dict) -> str:
    names = {"same": "same verse (positives)", "chapter": "same chapter (hard negatives)",
             "random": "other chapter (easy negatives)"}
    lines = [f"{result['split']}: {result['pairs']:,} pairs ({result['hard_negatives']} hard negatives), "
             f"{result['family']} ({result['checkpoint']} checkpoint): accuracy {100 * result['accuracy']:.2f}%"]
    lines += [f"  {names[k]:<31} {result[f'pairs_{k}']:>6,} pairs  accuracy {100 * result[f'accuracy_{k}']:.2f}%"
              for k in KINDS]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- explorer
@torch.no_grad()
def explore_pair(run: LoadedRun, a: str, b: str | None, beam: int | None = None, max_new: int = 0,
                 translator=None) -> Recording:
    """A sentence pair: the decomposable model's soft alignments, or MiniLM's self-attention of each sentence
    (its encoder reads each sentence alone), with P(same verse); and the "pair" map over both sentences for the
    sentence filter (`alignment_blocks`, `joint_self_attention`; MiniLM's only where the pair fits its positions). The explore hook (`attnlab.families.base.Explorer`):
    beam, max_new and translator do not apply."""
    if not b:
        raise AttnlabError("a sentence-pair run needs the second sentence of the pair (sentence b)")
    model, ids = run.model, pair_ids(run.cfg, run.tokenizers)
    ta, tb = (torch.tensor([x], device=run.device) for x in ids.ids([a, b]))
    logits = model(ta, ta > -1, tb, tb > -1)  # one pair, no padding
    p_same = logits.softmax(-1)[0, 1].item()
    maps: dict[str, AttentionMap] = {}
    if hasattr(model, "forward_with_weights"):
        la, lb = ids.pieces(a), ids.pieces(b)
        _, w = model.forward_with_weights(ta, ta > -1, tb, tb > -1)
        specs = (("a_to_b", "alignment a -> b (rows: softmax over b)", w.a_to_b, la, lb),
                 ("b_to_a", "alignment b -> a (rows: softmax over a)", w.b_to_a, lb, la),
                 ("intra_a", "intra-sentence attention of a", w.intra_a, la, la),
                 ("intra_b", "intra-sentence attention of b", w.intra_b, lb, lb))
        for key, title, weights, rows, cols in specs:
            if weights is not None:  # intra-sentence attention is optional
                maps[key] = AttentionMap(key, title, weights[0, None, None].float().cpu(), rows, cols)  # (1, 1, R, C)
        maps["pair"] = alignment_blocks(w, la, lb)
        scheme = scheme_of(run.tokenizers.src)
    else:
        encoder = model.encoder
        for key, side, t in (("a_self", "a", ta), ("b_self", "b", tb)):
            with capture([layer.self_attn for layer in encoder.layers]) as cap:
                weights = encoder_self_attention(encoder.embeddings(t), encoder.layers)
                q, k, scale = stacked_qk(cap, range(len(encoder.layers)))
            pieces = ids.tok.encode(a if side == "a" else b).tokens
            maps[key] = AttentionMap(key, f"encoder self-attention of {side}", weights, pieces, pieces, False, q, k,
                                     scale)
            with_rollout(maps, key)
        pieces = ids.tok.encode(a).tokens + ids.tok.encode(b).tokens[1:]  # [CLS] a [SEP] b [SEP]
        if len(pieces) <= encoder.embeddings.position.num_embeddings:
            maps["pair"] = joint_self_attention(encoder, ta, tb, pieces)
            with_rollout(maps, "pair")
        scheme = "wordpiece"
    return Recording(family=run.cfg.model.family, output=f"P(same verse) = {p_same:.3f}", maps=maps, scheme=scheme,
                     score=p_same)


def alignment_blocks(w, rows_a: list[str], rows_b: list[str]) -> AttentionMap:
    """The decomposable model's soft alignments of one pair as the blocks of one map over a's pieces, then b's
    (split at b's first), for the sentence filter: A->B a_to_b, B->A b_to_a, A->A and B->B the intra-sentence
    attention (zeros without it). Each block's rows are a softmax of their own. w: `DecomposableWeights` of a
    batch of one pair. Shape: (1, 1, La + Lb, La + Lb)."""
    La, Lb = len(rows_a), len(rows_b)
    blocks = torch.zeros(La + Lb, La + Lb)  # (La + Lb, La + Lb)
    blocks[:La, La:], blocks[La:, :La] = w.a_to_b[0].float().cpu(), w.b_to_a[0].float().cpu()
    if w.intra_a is not None:
        blocks[:La, :La], blocks[La:, La:] = w.intra_a[0].float().cpu(), w.intra_b[0].float().cpu()
    what = "a -> b and b -> a alignments" + (" and each sentence's intra-attention" if w.intra_a is not None else
                                              " (A->A and B->B empty: no intra-sentence attention)")
    return AttentionMap("pair", f"the pair in one map: {what}, each block's rows a softmax of their own",
                        blocks[None, None], rows_a + rows_b, rows_a + rows_b, split=La)


def joint_self_attention(encoder: BertEncoder, ta: Tensor, tb: Tensor, pieces: list[str]) -> AttentionMap:
    """MiniLM's encoder reading the pair as one input, as BERT reads a pair (Devlin et al. 2019, 3: [CLS] a [SEP]
    b [SEP], token type 0 for a's part, 1 for b's), with queries and keys: the pair map of the sentence filter.
    The classifier itself encodes each sentence alone (a siamese encoder); this is what its encoder does with
    both at once. ta, tb: (1, La), (1, Lb) ids of each sentence with its own [CLS] and [SEP]. Shape: weights
    (N, H, La + Lb - 1, La + Lb - 1)."""
    t = torch.cat([ta, tb[:, 1:]], 1)  # (1, T): b's [CLS] dropped
    types = torch.cat([torch.zeros_like(ta), torch.ones_like(tb[:, 1:])], 1)  # (1, T)
    with capture([layer.self_attn for layer in encoder.layers]) as cap:
        weights = encoder_self_attention(encoder.embeddings(t, types), encoder.layers)  # (N, H, T, T)
        q, k, scale = stacked_qk(cap, range(len(encoder.layers)))
    return AttentionMap("pair", "encoder self-attention of the pair read as one input ([CLS] a [SEP] b [SEP], as "
                        "BERT reads a pair; the classifier encodes each sentence alone)", weights, pieces, pieces,
                        False, q, k, scale, split=ta.size(1))


def pair_explorer_facts(run: LoadedRun) -> ExplorerFacts:
    """MiniLM's encoder layers of self-attention, or the decomposable model's one soft alignment."""
    cfg = run.cfg
    if cfg.model.family == "minilm":
        layers, heads = len(run.model.encoder.layers), run.model.encoder.layers[0].self_attn.h
        attention = "self-attention of each sentence (MiniLM)"
        return ExplorerFacts(cfg.model.family, "pair", attention, f"{attention}, {layers} layers x {heads} heads",
                             layers, heads, 1, cfg.model.minilm.max_len)
    return ExplorerFacts(cfg.model.family, "pair", "soft alignment (decomposable)", "soft alignment (decomposable)",
                         1, 1, 1, MAX_SERVED_TOKENS)


def pair_tokens(run: LoadedRun, sentence: str, sentence_b: str | None, max_new: int) -> int:
    """The tokens of both sentences; a missing sentence b, or a sentence over the limit of
    `pair_explorer_facts`, is an AttnlabError."""
    if not sentence_b:
        raise AttnlabError("a sentence-pair model needs sentence_b, the second sentence of the pair")
    lengths = [len(x) for x in pair_ids(run.cfg, run.tokenizers).ids([sentence, sentence_b])]
    limit = pair_explorer_facts(run).max_tokens
    if max(lengths) > limit:
        raise AttnlabError(f"a sentence of the pair has {max(lengths)} tokens; the limit is {limit}")
    return sum(lengths)


# ---------------------------------------------------------------------------------------------- plots
def plot_alignment(run: LoadedRun, a: str, b: str, out: Path | str, formats: tuple[str, ...] = ("png",)
                   ) -> tuple[list[Path], float]:
    """Heatmaps of the soft alignments of one pair (decomposable family): a_to_b (rows a tokens, each a softmax
    over b; the weights of beta) to OUT.<fmt>, and b_to_a transposed (columns sum to 1; the weights of alpha)
    to OUT_b.<fmt>. Returns (paths, P(same verse))."""
    a, b = normalize(a), normalize(b)
    if not a or not b:
        raise AttnlabError("both sentences of the pair (--a, --b) must be non-empty")
    model, ids = run.model, pair_ids(run.cfg, run.tokenizers)
    if not hasattr(model, "forward_with_weights"):
        raise AttnlabError(f"{run.run_dir}: a {run.cfg.model.family} model has no soft alignment to plot")
    ta, tb = (torch.tensor([x], device=run.device) for x in ids.ids([a, b]))
    with torch.no_grad():
        logits, w = model.forward_with_weights(ta, ta > -1, tb, tb > -1)  # no padding: all tokens real
    p_same = logits.softmax(-1)[0, 1].item()
    la, lb = ids.pieces(a), ids.pieces(b)
    out, paths = Path(out), []
    for fmt in formats:
        for suffix, weights, title in (("", w.a_to_b[0], "each row: softmax over b (weights of beta_i)"),
                                       ("_b", w.b_to_a[0].T, "each column: softmax over a (weights of alpha_j)")):
            path = out.with_name(out.name + suffix).with_suffix("." + fmt.strip())
            plot_attention(weights.cpu().numpy(), lb, la, path, title=f"P(same verse) = {p_same:.3f}; {title}",
                           xlabel="b (WEB)", ylabel="a (KJV)")
            paths.append(path)
    return paths, p_same
