"""The user-level jobs behind the CLI: train a run, evaluate it, translate with it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from attnlab.batching import Seq2SeqDataset
from attnlab.checkpoint import read_json, write_json
from attnlab.config import apply_overrides, to_dict
from attnlab.corpus import Corpus, atomic_write_text
from attnlab.errors import AttnlabError
from attnlab.experiment import ExperimentConfig, build_model, encode_pairs, experiment_from_dict, load_corpus
from attnlab.metrics import bleu_by_length, corpus_scores, format_length_table
from attnlab.plotting import plot_bleu_by_length
from attnlab.tokenizers import TokenizerPair, build_tokenizers, load_tokenizers, save_tokenizers, train_tokenizer
from attnlab.trainer import Trainer, resolve_device
from attnlab.translate import Translator


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _prepare_run(cfg: ExperimentConfig | None, run_dir: Path, resume: bool, overrides: list[str] | None = None
                 ) -> tuple[ExperimentConfig, Corpus, TokenizerPair]:
    """Writes (or, on resume, reads back) the run's config and tokenizer; returns them with the corpus."""
    if resume:
        if not (run_dir / "config.json").is_file():
            raise AttnlabError(f"{run_dir}: nothing to resume (config.json missing)")
        data = apply_overrides(read_json(run_dir / "config.json"), list(overrides or []))
        cfg = experiment_from_dict(data)
        write_json(run_dir / "config.json", to_dict(cfg))
        return cfg, load_corpus(cfg.data), load_tokenizers(run_dir / "tokenizer")
    if (run_dir / "checkpoints" / "latest.json").is_file():
        raise AttnlabError(f"{run_dir} already holds a trained run; use --resume to continue it or choose "
                           "another --out")
    corpus = load_corpus(cfg.data)
    t0 = time.perf_counter()
    if cfg.pretrained.decoder:  # the target side speaks the pretrained LM's vocabulary
        if cfg.tokenizer.joint:
            raise AttnlabError("pretrained.decoder needs tokenizer.joint = false: the target tokenizer is the LM's")
        lm_tok = load_tokenizers(Path(cfg.pretrained.decoder) / "tokenizer").tgt
        tokenizers = TokenizerPair(train_tokenizer(cfg.tokenizer, [p.src for p in corpus.train]), lm_tok,
                                   joint=False, config=cfg.tokenizer)
    else:
        tokenizers = build_tokenizers(cfg.tokenizer, [p.src for p in corpus.train], [p.tgt for p in corpus.train])
    print(f"tokenizer: {cfg.tokenizer.kind}, vocab {tokenizers.src.vocab_size:,}/{tokenizers.tgt.vocab_size:,} "
          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_tokenizers(tokenizers, run_dir / "tokenizer")
    write_json(run_dir / "config.json", to_dict(cfg))
    return cfg, corpus, tokenizers


def train_run(cfg: ExperimentConfig | None, run_dir: Path | str, resume: bool = False,
              overrides: list[str] | None = None) -> dict:
    """Trains the experiment into run_dir, or continues the run there (resume: cfg is read from the run,
    `overrides` may extend its limits); returns the final trainer state."""
    run_dir = Path(run_dir)
    cfg, corpus, tokenizers = _prepare_run(cfg, run_dir, resume, overrides)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    if cfg.pretrained.decoder and cfg.pretrained.init_weights and not resume:  # a resumed run loads its checkpoint
        from attnlab.lm import init_decoder_from_lm

        n = init_decoder_from_lm(model, cfg.pretrained.decoder, cfg.pretrained.checkpoint)
        print(f"decoder initialised from the LM in {cfg.pretrained.decoder} ({n:,} parameters copied)",
              file=sys.stderr)
    train_data = Seq2SeqDataset(*encode_pairs(corpus.train, tokenizers))
    dev_data = Seq2SeqDataset(*encode_pairs(corpus.dev, tokenizers))
    dev_pairs = corpus.dev[: cfg.train.eval_max_sentences or None]

    def dev_bleu(m: torch.nn.Module) -> dict:
        translator = Translator(m, tokenizers, cfg.decode, device=next(m.parameters()).device)
        hyps = [t[0].text for t in translator.translate([p.src for p in dev_pairs], beam_size=1)]
        s = corpus_scores(hyps, [p.tgt for p in dev_pairs])
        return {"bleu": s.bleu, "chrf": s.chrf}

    d_model = cfg.model.transformer.d_model if cfg.model.family == "transformer" else cfg.model.rnn.hidden_dim
    trainer = Trainer(model, cfg.train, train_data, dev_data, run_dir, dev_eval=dev_bleu, d_model=d_model)
    if resume:
        trainer.resume()
        print(f"resuming at step {trainer.state['step']} (epoch {trainer.state['epoch']})", file=sys.stderr)
    if trainer.is_main:
        print(f"model: {cfg.model.family}, {count_parameters(model):,} parameters; train pairs "
              f"{len(corpus.train):,}, dev {len(corpus.dev):,}; device {trainer.device}", file=sys.stderr)
    state = trainer.fit()
    if trainer.is_main:
        print(f"stopped after {state['step']} steps ({state['stopped']}); {state['train_seconds'] / 60:.1f} min "
              f"of training", file=sys.stderr)
    return state


def evaluate_run(run_dir: Path | str, split: str = "test", beam_size: int | None = None,
                 checkpoint: str = "best", device: str = "auto", max_sentences: int = 0) -> dict:
    """BLEU/chrF (sacrebleu) of a run on a split, BLEU by source length; writes
    RUN_DIR/eval/<split>.{json,hyp.txt}."""
    run_dir = Path(run_dir)
    translator = Translator.from_run(run_dir, checkpoint, device=str(resolve_device(device)))
    cfg = experiment_from_dict(read_json(run_dir / "config.json"))
    pairs = load_corpus(cfg.data).split(split)[: max_sentences or None]
    beam = cfg.decode.beam_size if beam_size is None else beam_size
    t0 = time.perf_counter()
    hyps = [t[0].text for t in translator.translate([p.src for p in pairs], beam_size=beam)]
    seconds = time.perf_counter() - t0
    scores = corpus_scores(hyps, [p.tgt for p in pairs])
    by_length = bleu_by_length([p.src for p in pairs], hyps, [p.tgt for p in pairs])
    result = {"split": split, "sentences": len(pairs), "beam": beam, "checkpoint": checkpoint,
              "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
              "chrf_signature": scores.chrf_signature, "by_length": by_length,
              "sentences_per_s": len(pairs) / max(seconds, 1e-9)}
    out = run_dir / "eval"
    result["plot"] = str(out / f"{split}_bleu_by_length.png")
    plot_bleu_by_length({run_dir.name: by_length}, result["plot"],
                        title=f"{run_dir.name}: {split} BLEU by source length")
    write_json(out / f"{split}.json", result)
    atomic_write_text(out / f"{split}.hyp.txt", "".join(h + "\n" for h in hyps))
    return result


def format_eval(result: dict) -> str:
    lines = [f"{result['split']}: {result['sentences']} sentences, beam {result['beam']}: "
             f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}",
             f"  {result['bleu_signature']}", f"  {result['chrf_signature']}",
             "BLEU by source length:", format_length_table(result["by_length"])]
    if "plot" in result:
        lines.append(f"plot: {result['plot']}")
    return "\n".join(lines)
