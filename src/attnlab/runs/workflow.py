"""The one run pipeline, for every model family (`attnlab.families.table`): train a config into a run directory,
resume it, load a trained run (and a translator or a CTranslate2 export of it), evaluate it, summarise a config
or a run.

A run directory::

    RUN_DIR/config.json      the resolved config (any family); it says which family the run is
    RUN_DIR/tokenizer/       the trained tokenizers (families that train one)
    RUN_DIR/metrics.jsonl    one JSON object per log / validation event
    RUN_DIR/checkpoints/     weights and trainer state (`attnlab.core.checkpoint`)
    RUN_DIR/eval/            results of `attnlab evaluate`
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from attnlab.core.checkpoint import average_into, load_weights, resolve_checkpoint
from attnlab.core.config import MAX_PARAMETERS, apply_overrides, to_dict
from attnlab.core.devices import resolve_device
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import make_dirs, open_lock_file, read_json, real_dir, write_json
from attnlab.core.summary import format_table, layer_table
from attnlab.data.corpus import SPLITS
from attnlab.data.store import Store, record_splits
from attnlab.data.tokenizers import TokenizerPair, load_tokenizers, save_tokenizers
from attnlab.decode.translate import CTranslate2Translator
from attnlab.families.base import EvalOptions, Family, LoadedRun
from attnlab.families.table import family_of, family_of_config, load_family_config, require
from attnlab.interop.ctranslate2 import (check_export, check_export_folder, check_exportable, ctranslate2_dir,
                                         export_ctranslate2, export_source, read_manifest, written_config)
from attnlab.interop.huggingface import export_huggingface, import_huggingface
from attnlab.runs.shipped import compact_run, run_path
from attnlab.training.state import TrainerState
from attnlab.training.trainer import Trainer, Training

log = logging.getLogger("attnlab")

# what a resumed run may change: its limits, and how it uses this machine (not what it computes)
RESUME_OVERRIDES = ("train.max_steps", "train.max_epochs", "train.max_minutes", "train.patience",
                    "train.num_threads", "train.progress", "train.device")


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class ShapesOnly(TorchFunctionMode):
    """Inside it, drawing a tensor's random initial values does nothing: for a model built on the meta device,
    whose parameters are shapes without values. `normal_` on a meta tensor otherwise runs torch's Python reference
    implementation, whose first call imports torch._dynamo: a second of every cold start that loads a run (five on
    a fresh GPU machine, docs/results.md "GPU"). A torch function mode is pushed for this thread only."""

    DRAWS = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_, torch.nn.init.normal_, torch.nn.init.uniform_,
                       torch.nn.init.trunc_normal_, torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_,
                       torch.nn.init.kaiming_uniform_, torch.nn.init.kaiming_normal_, torch.nn.init.orthogonal_})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.DRAWS:
            tensor = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by keyword
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def check_model_size(family: Family, cfg: Any, tokenizers: TokenizerPair | None) -> int:
    """The number of parameters of the family's model of `cfg`, counted on the meta device (shapes, no memory, no
    random numbers drawn: `ShapesOnly`); more than `MAX_PARAMETERS` is an AttnlabError."""
    with warnings.catch_warnings(), torch.device("meta"), ShapesOnly():
        warnings.simplefilter("ignore")  # a pretrained family copies its weights into meta tensors: a no-op
        n = sum(p.numel() for p in family.build_model(cfg, tokenizers).parameters())
    if n > MAX_PARAMETERS:
        raise AttnlabError(f"the model of this config would have {n:,} parameters, more than the limit "
                           f"{MAX_PARAMETERS:,}; choose smaller sizes under model (or a smaller vocabulary)")
    return n


def build_checked_model(family: Family, cfg: Any, tokenizers: TokenizerPair | None) -> torch.nn.Module:
    """The family's model of `cfg`, built only after `check_model_size` passed: sizes that each keep to their
    limit but multiply to too many parameters are refused before anything is allocated."""
    check_model_size(family, cfg, tokenizers)
    return family.build_model(cfg, tokenizers)


def run_config(run_dir: Path | str) -> tuple[Family, dict]:
    """(family, raw config dict) of a run directory."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise AttnlabError(f"{run_dir}: not a run directory (config.json missing)")
    raw = read_json(run_dir / "config.json")
    if not isinstance(raw, dict):
        raise AttnlabError(f"{run_dir / 'config.json'}: expected a table of keys")
    return family_of_config(raw), raw


def run_tokenizers(run_dir: Path) -> TokenizerPair | None:
    """The run's saved tokenizers, or None for a family that trains none (series, MiniLM)."""
    path = run_dir / "tokenizer"
    if path.exists() and not path.is_dir():
        raise AttnlabError(f"{path}: expected the run's tokenizer folder, found a file (the run directory is "
                           "damaged)")
    return load_tokenizers(path) if path.is_dir() else None


def check_resume_overrides(overrides: list[str]) -> None:
    bad = [o for o in overrides if o.split("=", 1)[0].strip() not in RESUME_OVERRIDES]
    if bad:
        raise AttnlabError(f"--set {bad[0]}: a resumed run keeps its config; only {', '.join(RESUME_OVERRIDES)} "
                           "may change")


def train(cfg: Any, run_dir: Path | str, resume: bool = False, overrides: list[str] | None = None) -> TrainerState:
    """Trains a config of any family into run_dir, or (resume=True, cfg None) continues the run there with
    `overrides` of its limits; returns the final trainer state.

    The steps, the same for every family: refuse to overwrite a trained run; load the data; train the tokenizers
    (or read them back on resume) and write them with config.json; seed; build the model (and, for a new run,
    initialise it from pretrained weights if the config says so); hand the family's datasets, task and dev
    metrics to the one trainer; fit.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise AttnlabError(f"{run_dir}: the run directory is a file; choose another --out")
    lock = hold_run(run_dir) if int(os.environ.get("RANK", 0)) == 0 else None  # rank 0 of --procs N holds it
    try:
        return _train(cfg, run_dir, resume, overrides)
    finally:
        if lock is not None:
            lock.close()


def hold_run(run_dir: Path):
    """An exclusive lock on `.NAME.lock` beside RUN_DIR (its parent made where needed), held open by the training
    that writes into the run: a second `train`, new or `--resume`, into the same folder is refused while it runs
    (released when the process ends, however it ends). Returns the open lock file."""
    make_dirs(run_dir.parent)
    lock = open_lock_file(run_dir.parent / f".{run_dir.name}.lock", "the run's")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise AttnlabError(f"{run_dir}: another training is writing into this run now; wait for it to end, or "
                           "choose another --out") from None
    return lock


def _train(cfg: Any, run_dir: Path, resume: bool, overrides: list[str] | None) -> TrainerState:
    """`train` once the run's folder is held."""
    if resume:
        if not (run_dir / "config.json").is_file():
            raise AttnlabError(f"{run_dir}: nothing to resume (config.json missing)")
        check_resume_overrides(list(overrides or []))
        family, raw = run_config(run_dir)
        cfg = family.from_dict(apply_overrides(raw, list(overrides or [])))
    else:
        if cfg is None:
            raise AttnlabError("a new run needs a config")
        if (run_dir / "checkpoints" / "latest.json").is_file():
            raise AttnlabError(f"{run_dir} already holds a trained run; use --resume to continue it or choose "
                               "another --out")
        family = family_of(cfg)
    tokenizers = run_tokenizers(run_dir) if resume else None
    data = family.load_data(cfg, tokenizers)
    if not resume:
        tokenizers = family.make_tokenizers(cfg, data)
    created = not os.path.lexists(run_dir)  # a refused new run removes the folder it made, and only that
    try:
        make_dirs(run_dir)
        real_dir(run_dir / "checkpoints", run_dir)  # a linked folder is refused before anything is written into it
        if tokenizers is not None and not resume:
            save_tokenizers(tokenizers, real_dir(run_dir / "tokenizer", run_dir))
        write_json(run_dir / "config.json", to_dict(cfg), run_dir)
        if isinstance(data, Store) and not resume:
            record_splits(data, run_dir)
        if cfg.train.num_threads:
            torch.set_num_threads(cfg.train.num_threads)
        torch.manual_seed(cfg.train.seed)
        model = build_checked_model(family, cfg, tokenizers)
        if not resume and family.initialise is not None:
            family.initialise(cfg, model, load_run)  # --init: the run's weights, checked
    except AttnlabError:
        if created and not resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    training = family.training(cfg, data, tokenizers, model)
    trainer = Trainer(model, cfg.train, training.train_data, training.dev_data, run_dir, dev_eval=training.dev_eval,
                      d_model=training.d_model, task=training.task)
    if resume:
        trainer.resume()
        log.info("resuming at step %d (epoch %d)", trainer.state.step, trainer.state.epoch)
    if trainer.is_main:
        log.info("model: %s, %s trainable parameters; %s; device %s", family.title,
                 f"{count_parameters(model):,}", training.sizes, trainer.device)
    try:
        state = trainer.fit()
    finally:
        trainer.close()
    if trainer.is_main:
        log.info("stopped after %d steps (%s); %.1f min of training; %s", state.step, state.stopped,
                 state.train_seconds / 60, _best(state, training, cfg.train.eval_bleu))
    return state


def _best(state: TrainerState, training: Training, eval_metric: bool) -> str:
    """The selection score in words: the dev metric (BLEU, accuracy) or, without one, the dev loss."""
    if state.best_score is None:
        return "not validated"
    if training.dev_eval is not None and eval_metric:
        return f"best dev {training.score_name} {state.best_score:.4f}"
    loss = -state.best_score
    ppl = f" (perplexity {math.exp(min(loss, 50.0)):.2f})" if getattr(training.task, "perplexity", False) else ""
    return f"best dev loss {loss:.4f}{ppl}"


def load_run(run_dir: Path | str, checkpoint: str = "best", device: str | torch.device = "cpu",
             ability: str | None = None) -> LoadedRun:
    """A trained run of any family with its best or last weights, in eval mode on `device`; `ability`
    ("translate", "generate", "classify"): refuse, naming the right command, a run that cannot do it. `run_dir` may
    be `pretrained:NAME`, a model that ships with attnlab (`attnlab.runs.shipped`)."""
    run_dir = run_path(run_dir)
    family, raw = run_config(run_dir)
    if ability is not None:
        require(family, ability, run_dir)
    cfg = family.from_dict(raw)
    device = resolve_device(device) if isinstance(device, str) else device
    tokenizers = run_tokenizers(run_dir)
    if tokenizers is None and family.uses_tokenizers(cfg):  # else a model of the config's default sizes
        raise AttnlabError(f"{run_dir}: the run's tokenizer folder ({run_dir / 'tokenizer'}) is missing; a "
                           f"{family.title} run reads and writes text with it")
    model = build_checked_model(family, cfg, tokenizers)
    load_weights(model, resolve_checkpoint(run_dir, checkpoint))
    return LoadedRun(run_dir, family, cfg, tokenizers, model.to(device).eval(), checkpoint, device)


def ctranslate2_translator(run: LoadedRun, model_dir: Path | str | None = None) -> CTranslate2Translator:
    """A translation run decoded by CTranslate2 with its tokenizers and decode settings, from `model_dir`
    (checked by `attnlab.interop.ctranslate2.check_export` against the run's tokenizers and the config values
    attnlab writes for its model: a disagreement is an AttnlabError naming the file) or the run's own float32 export
    (`ctranslate2_model`: made on first use, made again when stale or damaged)."""
    check_exportable(run)
    run_dir, checkpoint, tokenizers, decode = run.run_dir, run.checkpoint, run.tokenizers, run.cfg.decode
    written = written_config(run.model)
    if model_dir is None:
        model_dir = ctranslate2_model(run_dir, checkpoint, tokenizers, written)
        try:
            return CTranslate2Translator(model_dir, tokenizers, decode)
        except AttnlabError as e:  # model.bin does not load although the manifest agrees: rewritten with it
            log.info("exporting %s again: %s", run_dir, e)
            export_run(run_dir, model_dir, "float32", checkpoint)
    else:
        check_export(model_dir, tokenizers, written=written)
        manifest = read_manifest(Path(model_dir), required=False)
        source = export_source(run_dir, checkpoint)
        if manifest is not None and manifest.get("checkpoint_sha256") != source["checkpoint_sha256"]:
            log.warning("%s was exported from another checkpoint than the run's %s one (%s)", model_dir, checkpoint,
                        source["checkpoint_file"])
    return CTranslate2Translator(model_dir, tokenizers, decode)


def export_run(run_dir: Path | str, out: Path | str | None = None, quantization: str = "float32",
               checkpoint: str = "best", to: str = "ctranslate2") -> Path:
    """Exports a Transformer translation or language-model run to CTranslate2 (`attnlab.interop.ctranslate2`;
    default RUN_DIR/ctranslate2-<checkpoint>-<quantization>) or a Transformer translation run to Hugging Face
    (`attnlab.interop.huggingface`, float32 only; default RUN_DIR/huggingface-<checkpoint>), or any run to a
    compact attnlab run (`attnlab.runs.shipped.compact_run`: float32, bfloat16 or int8 weights, no training state;
    default RUN_DIR-<quantization> beside the run); returns the folder.
    The checkpoint and tokenizer are hashed before the weights are loaded: a checkpoint that moves meanwhile makes
    the export stale, never wrongly current."""
    if to not in ("ctranslate2", "huggingface", "attnlab"):
        raise AttnlabError(f"--to {to!r}: choose ctranslate2, huggingface or attnlab")
    run_dir = run_path(run_dir)
    if to == "attnlab":  # a compact run of any family (`attnlab.runs.shipped`)
        if out is None:
            out = Path(run_dir).with_name(f"{Path(run_dir).name}-{quantization}")
        return compact_run(load_run(run_dir, checkpoint, "cpu"), out, quantization)
    source = export_source(run_dir, checkpoint)
    if to == "huggingface":
        if quantization != "float32":
            raise AttnlabError(f"--quantization {quantization}: a Hugging Face export is float32 (transformers "
                               "converts on load: from_pretrained(DIR, dtype=...))")
        return export_huggingface(load_run(run_dir, checkpoint, "cpu"), out, source)
    return export_ctranslate2(load_run(run_dir, checkpoint, "cpu"), out, quantization, source)


def average_run(run_dir: Path | str, last: int, out: Path | str | None = None) -> Path:
    """A compact float32 run (`attnlab.runs.shipped.compact_run`; default RUN_DIR-avgN beside the run) whose weights
    are the mean of the run's `last` newest checkpoints (`attnlab.core.checkpoint.average_into`), named in its
    card; it loads like any run. Returns the folder."""
    run_dir = run_path(run_dir)
    run = load_run(run_dir, "last", "cpu")
    steps = average_into(run.model, Path(run_dir) / "checkpoints", last)
    log.info("%s: averaged the weights of steps %s", run_dir, ", ".join(map(str, steps)))
    if out is None:
        out = Path(run_dir).with_name(f"{Path(run_dir).name}-avg{last}")
    return compact_run(run, out, "float32", averaged=steps)


def import_run(src: Path | str, out: Path | str) -> Path:
    """A run directory made from a Hugging Face model (`attnlab.interop.huggingface.import_huggingface`: MarianMT,
    GPT-2-class or BERT-class; a save_pretrained folder, or a hub name with internet), which every command then
    loads like a trained run."""
    out = import_huggingface(src, out)
    load_run(out)  # what every command will do with it: refuse here, not later
    return out


def ctranslate2_model(run_dir: Path | str, checkpoint: str = "best", tokenizers: TokenizerPair | None = None,
                      written: dict | None = None) -> Path:
    """The run's float32 CTranslate2 model directory (what `--engine ctranslate2` runs without an explicit model
    directory), exported on first use and exported again when `attnlab.interop.ctranslate2.check_export` finds it
    stale (made from another checkpoint or tokenizer: `train --resume` moved `checkpoint`) or damaged (a file changed,
    missing, or the export cut short)."""
    run_dir = Path(run_dir)
    out = ctranslate2_dir(run_dir, checkpoint)
    tokenizers = tokenizers if tokenizers is not None else run_tokenizers(run_dir)
    check_export_folder(out)  # a link or a file there: refused, not exported again
    try:
        check_export(out, tokenizers, export_source(run_dir, checkpoint), written)
    except AttnlabError as e:
        if out.exists() or out.is_symlink():
            log.info("exporting %s again: %s", run_dir, e)
        export_run(run_dir, out, "float32", checkpoint)
        check_export(out, tokenizers, export_source(run_dir, checkpoint), written)
    return out


def evaluate_run(run: LoadedRun, split: str = "test", options: EvalOptions = EvalOptions()) -> dict:
    """The family's evaluation of a loaded run on a split (`evaluate` for a run already in memory)."""
    if split not in SPLITS:
        raise AttnlabError(f"unknown split {split!r}; choose train, dev or test")
    if options.source is not None and "translate" not in run.family.abilities:
        raise AttnlabError(f"--source picks the English rendering of a translation run's source side; this is a "
                           f"{run.family.title} run")
    real_dir(run.run_dir / "eval", run.run_dir)  # the family writes its results there: never into a link
    return run.family.evaluate(run, split, options)


def summary(target: Path, overrides: list[str] | None = None, src_len: int = 7, tgt_len: int = 6) -> str:
    """Per-layer output shapes and parameter counts of a config file or a run directory's model, from one
    forward pass on a dummy batch of the family's inputs."""
    if target.is_dir():
        family, raw = run_config(target)
        cfg, tokenizers = family.from_dict(raw), run_tokenizers(target)
    else:
        (family, cfg), tokenizers = load_family_config(target, overrides), None
    model = build_checked_model(family, cfg, tokenizers)
    inputs, description = family.summary_inputs(cfg, tokenizers, src_len, tgt_len)
    return format_table(layer_table(model, *inputs), f"{target}: {family.title}, {description}")
