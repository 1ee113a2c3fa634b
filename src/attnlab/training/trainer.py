"""The one trainer, shared by every model family: teacher forcing, label-smoothed cross-entropy,
Adam/AdamW, gradient clipping, learning-rate schedules, token-budget batches, gradient accumulation,
periodic validation, early stopping, atomic checkpoints with exact resume, a metrics log, and DDP under
torchrun.

The loop is explicit (as in nanoGPT); each part is a small named method: `train_step`, `validate`,
`checkpoint`, `fit`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

import torch
from torch import nn
from torch.utils.data import DataLoader

from attnlab.core.checkpoint import load_checkpoint, read_pointer, recover, save_checkpoint, step_name, write_best
from attnlab.core.config import MAX_COUNT, MAX_LEN, MAX_SEED, MAX_THREADS, from_dict
from attnlab.core.devices import DEVICES, amp_dtype, autocast, resolve_device
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import append_line, atomic_write_text, make_dirs, real_dir
from attnlab.core.logs import Progress
from attnlab.data.batching import (Seq2SeqBatch, TokenBudgetBatchSampler, collate_packed_seq2seq, collate_seq2seq,
                                   training_batches)
from attnlab.data.tokenizers import PAD_ID
from attnlab.kernels.loss import smoothed_cross_entropy
from attnlab.kernels.memory import keep_freed_memory
from attnlab.training.interrupt import StopRequest, stop_at_step_end
from attnlab.training.optim import lr_factor, make_optimizer
from attnlab.training.state import TrainerState

log = logging.getLogger("attnlab")


@dataclass
class TrainConfig:
    seed: int = 1
    max_steps: int = 20000  # optimizer updates
    max_epochs: int = 0  # 0: no limit
    max_minutes: float = 0.0  # wall-clock budget of this invocation; 0: no limit
    max_tokens: int = 4096  # token budget of one batch (padding included)
    pack: bool = False  # several sentences per row with per-sentence attention masks (Transformer, LM)
    pack_length: int = 0  # tokens per packed row; 0: the longest training example
    length_multiple: int = 0  # a grid of shapes: lengths padded to multiples of it (`attnlab.data.batching`); 0: off
    warmup_shapes: bool = False  # one forward and backward of each grid shape before the clock starts
    accum_steps: int = 1  # batches per optimizer update
    optimizer: str = "adam"
    lr: float = 1e-3
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    schedule: str = "constant"  # constant | inverse_sqrt | noam | plateau
    warmup_steps: int = 0
    plateau_factor: float = 0.5
    plateau_patience: int = 2
    min_lr: float = 1e-5
    clip_norm: float = 1.0  # 0: no clipping
    label_smoothing: float = 0.1
    eval_every: int = 500  # steps between validations
    eval_bleu: bool = True  # run dev_eval (dev BLEU, greedy; accuracy) at every validation; else select on dev loss
    eval_max_sentences: int = 0  # decode only the first N dev sentences for BLEU (0: all)
    patience: int = 0  # early stop after this many validations without improvement (0: off)
    keep_last: int = 2
    log_every: int = 50
    tensorboard: bool = False
    device: str = "auto"  # auto | cpu | cuda | mps
    amp: str = "auto"  # auto (bf16 where the device computes it natively, else fp32) | none | bf16 | fp16 (CUDA)
    num_threads: int = 0  # CPU threads for torch (0: torch's default)
    compile: bool = False  # torch.compile the model (dynamic shapes; worth it for long GPU runs)
    fused_loss: bool = False  # Transformer, LM: output layer and loss in one, never the whole logits (kernels.linear_ce)
    progress: bool = True  # a progress bar on a terminal; elsewhere one plain line every log_every steps

    CHOICES: ClassVar[dict] = {"optimizer": ("adam", "adamw"),
                               "schedule": ("constant", "inverse_sqrt", "noam", "plateau"),
                               "device": DEVICES, "amp": ("none", "auto", "bf16", "fp16")}
    LIMITS: ClassVar[dict] = {
        "seed": (0, MAX_SEED), "max_steps": (0, MAX_COUNT), "max_epochs": (0, MAX_COUNT),
        "max_minutes": (0.0, 1e7), "max_tokens": (1, 2**24), "pack_length": (0, MAX_LEN), "accum_steps": (1, 2**16),
        "lr": (0.0, 100.0), "adam_beta1": (0.0, 1.0), "adam_beta2": (0.0, 1.0), "weight_decay": (0.0, 100.0),
        "warmup_steps": (0, MAX_COUNT), "plateau_factor": (0.0, 1.0), "plateau_patience": (1, MAX_COUNT),
        "min_lr": (0.0, 100.0), "clip_norm": (0.0, 1e9), "label_smoothing": (0.0, 1.0), "eval_every": (1, MAX_COUNT),
        "eval_max_sentences": (0, MAX_COUNT), "patience": (0, MAX_COUNT), "keep_last": (1, MAX_COUNT),
        "log_every": (1, MAX_COUNT), "num_threads": (0, MAX_THREADS), "length_multiple": (0, 4096)}

    def __post_init__(self) -> None:
        for name in ("max_tokens", "accum_steps", "eval_every", "log_every", "keep_last"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "max_epochs", "warmup_steps", "patience", "eval_max_sentences", "num_threads",
                     "pack_length"):
            if getattr(self, name) < 0:
                raise AttnlabError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.plateau_patience < 1:
            raise AttnlabError(f"plateau_patience must be >= 1, got {self.plateau_patience}")
        for name in ("max_minutes", "lr", "min_lr", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise AttnlabError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("label_smoothing", "adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise AttnlabError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0.0 < self.plateau_factor <= 1.0:
            raise AttnlabError(f"plateau_factor must be in (0, 1], got {self.plateau_factor}")
        if self.warmup_shapes and not self.length_multiple:
            raise AttnlabError("warmup_shapes = true needs the grid: set length_multiple (e.g. 16) or leave it out")
        if self.pack_length and not self.pack:
            raise AttnlabError(f"pack_length = {self.pack_length} sizes packed rows, but pack = false: set "
                               "pack = true to pack, or leave pack_length out")


MIN_SENTENCE_TOKENS = 2  # the cost of the shortest sentence example: one token and its EOS (or BOS)


def check_sentence_budget(cfg: TrainConfig) -> None:
    """An AttnlabError unless train.max_tokens holds at least one sentence: for the families whose examples end in
    EOS or start with BOS (translation, language models). A series window costs 1, and so may a pair's row."""
    if cfg.max_tokens < MIN_SENTENCE_TOKENS:
        raise AttnlabError(f"train.max_tokens = {cfg.max_tokens} cannot hold any sentence (the shortest costs "
                           f"{MIN_SENTENCE_TOKENS} tokens: one token and its EOS); it is the token budget of a batch "
                           "of padded sentences, e.g. 4096")


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Summed label-smoothed cross-entropy over non-pad targets. logits (B, T, V), targets (B, T)."""
    return smoothed_cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), label_smoothing, PAD_ID)


class Task(Protocol):
    """What the trainer needs to know about a kind of data: how to batch examples and what the loss is.

    `collate(examples) -> batch` (the batch has `.to(device)`); `loss(model, batch, label_smoothing) ->
    (summed loss over the batch's items, number of items)`; `perplexity`: whether exp(dev loss) means something.
    A task whose examples can share a row (`train.pack`) also has `collate_packed(examples, row_len) -> batch`; one
    whose batches take a grid (`train.length_multiple`) has `collate_grid(examples, length_multiple)`.
    Datasets give `__len__`, `__getitem__` and `lengths()` (each example's cost for the token budget).
    """

    perplexity: bool

    def collate(self, examples: list) -> Any: ...

    def loss(self, model: nn.Module, batch: Any, label_smoothing: float) -> tuple[torch.Tensor, int]: ...


@dataclass
class Seq2SeqTask:
    """Teacher-forced sequence-to-sequence: model(src, src_lengths, tgt_in) -> logits (B, T, V); loss summed over
    non-pad target tokens. fused_loss (`train.fused_loss`, a Transformer): the model computes the loss with its
    output layer, model(..., targets=, label_smoothing=, ignore_index=) -> loss, never the whole logits."""

    fused_loss: bool = False
    perplexity: ClassVar[bool] = True

    @staticmethod
    def collate(examples: list) -> Seq2SeqBatch:
        return collate_seq2seq(examples)

    @staticmethod
    def collate_grid(examples: list, length_multiple: int) -> Seq2SeqBatch:
        return collate_seq2seq(examples, length_multiple)

    @staticmethod
    def collate_packed(examples: list, row_len: int, length_multiple: int = 0) -> Seq2SeqBatch:
        return collate_packed_seq2seq(examples, row_len, length_multiple)

    def loss(self, model: nn.Module, batch: Seq2SeqBatch, label_smoothing: float) -> tuple[torch.Tensor, int]:
        packed = {} if batch.src_segments is None else {"src_segments": batch.src_segments,
                                                         "tgt_segments": batch.tgt_segments}
        if self.fused_loss:
            return model(batch.src, batch.src_lengths, batch.tgt_in, **packed, targets=batch.tgt_out,
                         label_smoothing=label_smoothing, ignore_index=PAD_ID), batch.num_tgt_tokens
        logits = model(batch.src, batch.src_lengths, batch.tgt_in, **packed)  # (B, T, V)
        return sequence_loss(logits, batch.tgt_out, label_smoothing), batch.num_tgt_tokens


@dataclass
class Training:
    """What a model family hands the trainer (`attnlab.families.table`): the task (batching and loss), the encoded
    datasets, the optional dev metrics callable and the name of the score it selects on ("BLEU", "accuracy"),
    d_model for the noam schedule, and a line describing the data sizes for the log."""

    task: Task
    train_data: Any
    dev_data: Any
    dev_eval: Callable[[nn.Module], dict] | None = None
    d_model: int = 512
    sizes: str = ""
    score_name: str = "score"


@torch.no_grad()
def summed_loss(model: nn.Module, task: Task, data, max_tokens: int, device: torch.device,
                autocast: Callable[[], Any] = contextlib.nullcontext) -> tuple[float, int]:
    """The task's loss (no label smoothing) summed over a dataset in length-sorted token-budget batches, and the
    number of items it covers (target tokens, sentences, pairs)."""
    losses, count = [], 0
    sampler = TokenBudgetBatchSampler(data.lengths(), max_tokens, shuffle=False)
    for idx in sampler:
        batch = task.collate([data[i] for i in idx]).to(device)
        with autocast():
            loss, n = task.loss(model, batch, 0.0)
        losses.append(loss.detach().float())
        count += n
    # read back once, at the end, and summed in float64 on the host (MPS has no float64)
    return float(torch.stack(losses).cpu().double().sum()) if losses else 0.0, count


class Trainer:
    """Trains `model` on token-budget batches of `train_data`, with the loss of `task` (default: seq2seq).

    Args:
        model: any attnlab model (`raw_model`); `model` is what runs the steps: the same module, or it wrapped in
            DistributedDataParallel (under torchrun) and/or torch.compile. Checkpoints save `raw_model`.
        cfg: the train section of the experiment config.
        train_data / dev_data: encoded datasets (with `lengths()`).
        run_dir: where checkpoints, metrics.jsonl and TensorBoard logs go.
        dev_eval: optional callable(model) -> dict of extra dev metrics, e.g. {"bleu", "chrf"} (decodes the dev
            set) or {"accuracy"}. The model-selection score is bleu if present, else accuracy, else -dev_loss.
        d_model: for the noam schedule.
        task: a `Task`; default `Seq2SeqTask(cfg.fused_loss)`.
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, train_data, dev_data, run_dir: Path,
                 dev_eval: Callable[[nn.Module], dict] | None = None, d_model: int = 512,
                 task: Task | None = None) -> None:
        self.cfg, self.run_dir, self.dev_eval, self.d_model = cfg, Path(run_dir), dev_eval, d_model
        self.task = task if task is not None else Seq2SeqTask(cfg.fused_loss)
        if cfg.fused_loss and not getattr(self.task, "fused_loss", False):
            raise AttnlabError("train.fused_loss = true needs a model whose forward computes its loss with the output "
                               "layer: the Transformer (model.family = 'transformer') or the language model; this "
                               "run's loss takes the logits, so leave train.fused_loss out")
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.rank = int(os.environ.get("RANK", 0))
        self.is_main = self.rank == 0
        self.device = resolve_device(cfg.device)
        self._owns_group = self.world > 1 and not torch.distributed.is_initialized()
        if self._owns_group:
            torch.distributed.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        else:  # each step's freed tensors reused, not faulted back in page by page (attnlab.kernels.memory)
            keep_freed_memory()
        self.raw_model = model.to(self.device)
        self.model: nn.Module = self.raw_model
        if self.world > 1:
            self.model = nn.parallel.DistributedDataParallel(
                self.raw_model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if cfg.compile:  # the compiled module shares its parameters with raw_model, which checkpoints use
            self.model = torch.compile(self.model, dynamic=True)
        self.train_data, self.dev_data = train_data, dev_data
        self.sampler, self.collate = training_batches(
            self.task, train_data.lengths(), cfg.max_tokens, pack=cfg.pack, pack_length=cfg.pack_length,
            length_multiple=cfg.length_multiple, seed=cfg.seed, num_replicas=self.world, rank=self.rank)
        if len(self.sampler) < cfg.accum_steps:  # an update would never complete: the loop would not end
            raise AttnlabError(f"train.accum_steps ({cfg.accum_steps}) exceeds the {len(self.sampler)} batches of "
                               f"an epoch (train.max_tokens {cfg.max_tokens}); lower it or the batch size")
        self.optimizer = make_optimizer(self.raw_model, cfg.optimizer, cfg.lr, (cfg.adam_beta1, cfg.adam_beta2),
                                        cfg.weight_decay, fused=self.device.type in ("cuda", "cpu"))
        self.amp_dtype = amp_dtype(cfg.amp, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        if self.is_main and cfg.amp != "none":
            log.info("precision: %s autocast on %s (train.amp = %s)", {torch.bfloat16: "bf16", torch.float16: "fp16",
                     None: "fp32, no"}[self.amp_dtype], self.device.type, cfg.amp)
        self.state = TrainerState()
        self.tb = self._tensorboard_writer()
        self._t_start = time.perf_counter()

    def _tensorboard_writer(self):
        if not (self.cfg.tensorboard and self.is_main):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter  # optional dependency: tensorboard
        except ImportError:
            raise AttnlabError("train.tensorboard = true needs the tensorboard package "
                               "(pip install tensorboard)") from None
        return SummaryWriter(str(real_dir(self.run_dir / "tensorboard", self.run_dir)))  # never into a link

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.amp_dtype, self.device)

    def current_lr(self) -> float:
        lr = self.cfg.lr * lr_factor(self.cfg.schedule, self.cfg.warmup_steps, self.state.step + 1,
                                    self.d_model) * self.state.lr_scale
        return max(lr, self.cfg.min_lr) if self.cfg.schedule == "plateau" else lr

    def train_step(self, batches: list) -> tuple[torch.Tensor, int]:
        """One optimizer update over `batches` (gradient accumulation). Returns (summed loss, items), items being
        target tokens for seq2seq. The loss is a 0-d float32 tensor on the device, not read back here: on a GPU,
        reading it (`float(loss)`) waits for the step to finish, so `fit` reads it once per log record, and the
        next step is queued while this one runs. With `Seq2SeqTask` nothing else is read on the host (its items are
        counted when the batch is collated; `tests/test_host_waits.py`); DDP reads the ranks' items and stop flag."""
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.current_lr()
        batches = [b.to(self.device, non_blocking=True) for b in batches]
        losses, counts = [], []
        # the loss is normalised by the items of the whole update, known only after the forward passes; backward
        # each micro-batch with the running count, then rescale the gradients once
        for i, batch in enumerate(batches):
            sync = self.world == 1 or i == len(batches) - 1
            ctx = self.model.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                with self._autocast():
                    loss, n = self.task.loss(self.model, batch, self.cfg.label_smoothing)
                self.scaler.scale(loss).backward()
            losses.append(loss.detach())
            counts.append(n)
        ntok = sum(counts)
        # the loss of an update is normalised by the items of all ranks together: DDP averages the gradients over
        # the ranks, so each rank scales by world / global items, and R ranks equal one rank with all R batches
        scale = 1.0 / max(ntok, 1)
        if self.world > 1:
            total_items = torch.tensor([ntok], dtype=torch.float64,
                                       device=self.device if self.device.type == "cuda" else "cpu")
            torch.distributed.all_reduce(total_items)
            scale = self.world / max(float(total_items.item()), 1.0)
        grads = [p.grad for p in self.raw_model.parameters() if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, scale)  # one multi-tensor kernel on a GPU, not one per parameter
        total = torch.stack(losses).sum().float()
        if self.cfg.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        return total, ntok

    def warm_up(self) -> None:
        """A forward and backward of each shape of the grid (`train.warmup_shapes`): a GPU meets each shape's cost
        (kernel choice, compiling) before the clock starts. Weights, optimizer and random state stay as they were."""
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            self.model.train()
            for idx in self.sampler.grid_batches():
                with self._autocast():
                    loss, _ = self.task.loss(self.model, self.collate([self.train_data[i] for i in idx]).to(
                        self.device), self.cfg.label_smoothing)
                loss.backward()
        self.optimizer.zero_grad(set_to_none=True)  # the gradients dropped

    def _loader(self, data, batches) -> DataLoader:
        # A DataLoader iterator draws a seed from the global RNG unless given a generator of its own; that
        # draw would make dropout after a resume differ from an uninterrupted run.
        pin = self.device.type == "cuda"
        return DataLoader(data, batch_sampler=batches, collate_fn=self.collate, generator=torch.Generator(),
                          pin_memory=pin)

    @torch.no_grad()
    def dev_loss(self) -> dict:
        """Dev loss per item (target token for seq2seq; without label smoothing) and, if meaningful, perplexity."""
        self.raw_model.eval()
        total, count = summed_loss(self.raw_model, self.task, self.dev_data, self.cfg.max_tokens, self.device,
                                   self._autocast)
        loss = total / max(count, 1)
        out = {"dev_loss": loss}
        if getattr(self.task, "perplexity", True):
            out["dev_ppl"] = math.exp(min(loss, 50.0))
        return out

    def validate(self) -> dict:
        """Dev loss/perplexity and the dev_eval metrics (BLEU/chrF, accuracy; if configured); updates best,
        patience and the plateau scale."""
        s = self.state
        metrics = self.dev_loss()
        if self.dev_eval is not None and self.cfg.eval_bleu:
            self.raw_model.eval()
            metrics.update(self.dev_eval(self.raw_model))
        score = next((metrics[k] for k in ("bleu", "accuracy") if k in metrics), -metrics["dev_loss"])
        improved = s.best_score is None or score > s.best_score
        if improved:
            s.best_score, s.best_step, s.bad_evals = score, s.step, 0
        else:
            s.bad_evals += 1
            if self.cfg.schedule == "plateau" and s.bad_evals % self.cfg.plateau_patience == 0:
                s.lr_scale *= self.cfg.plateau_factor
        metrics["improved"] = improved
        return metrics

    def checkpoint(self, best: bool) -> None:
        if self.is_main:  # with the seconds trained up to this step: a run resumed from it counts on from there
            save_checkpoint(self.run_dir / "checkpoints", self.state.step, self.raw_model, self.optimizer,
                            {**dataclasses.asdict(self.state), "train_seconds": self._seconds_trained()},
                            self.cfg.keep_last, best=best)

    def _seconds_trained(self) -> float:  # wall clock, validation included, resumed runs continuing the count
        return self.state.train_seconds + time.perf_counter() - self._t_start

    def log(self, record: dict) -> None:
        if not self.is_main:
            return
        record = {**record, "time_s": round(self._seconds_trained(), 2)}
        append_line(self.run_dir / "metrics.jsonl", json.dumps(record))
        if self.tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                    self.tb.add_scalar(k, v, record["step"])

    def resume(self) -> None:
        """Continues from the checkpoint latest.json names, after `recover` has removed what a kill left behind;
        best.json is pointed again at the best step if a kill came between the two pointers; metrics.jsonl is cut
        back to the resumed step (the steps after it will be logged again)."""
        ckpt = self.run_dir / "checkpoints"
        if self.is_main:
            for path in recover(ckpt):
                log.info("removed %s (left by an interrupted checkpoint)", path)
        self.state = TrainerState.from_dict(load_checkpoint(ckpt, self.raw_model, self.optimizer), str(ckpt))
        self.state.stopped = None
        if self.is_main:
            best = read_pointer(ckpt, "best.json")
            b = self.state.best_step
            if b is not None and (best is None or best.get("step") != b) and \
                    (ckpt / f"{step_name(b)}.safetensors").is_file():
                write_best(ckpt, b, self.state.best_score)
            self._cut_metrics(self.state.step)

    def _cut_metrics(self, step: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return
        kept = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
                kept.append(line)
        atomic_write_text(path, "".join(line + "\n" for line in kept))

    def _done(self, t_start: float) -> str | None:
        """Why training should stop now, or None. Under DDP the ranks agree (a clock may differ by a step)."""
        reason = self._local_done(t_start)
        if self.world > 1:
            flag = torch.tensor([reason is not None], dtype=torch.int32,
                                device=self.device if self.device.type == "cuda" else "cpu")
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            if flag.item() and reason is None:
                reason = "another rank stopped"
        return reason

    def _local_done(self, t_start: float) -> str | None:
        c, s = self.cfg, self.state
        if s.step >= c.max_steps:
            return "max_steps"
        if c.max_epochs and s.epoch >= c.max_epochs:
            return "max_epochs"
        if c.max_minutes and time.perf_counter() - t_start >= 60 * c.max_minutes:
            return "max_minutes"
        if c.patience and s.bad_evals >= c.patience:
            return "early_stopping"
        return None

    def fit(self) -> TrainerState:
        """Trains until a limit in the config is reached; returns the final trainer state."""
        cfg, s = self.cfg, self.state
        make_dirs(self.run_dir)
        if cfg.warmup_shapes:
            self.warm_up()
        t_start = self._t_start = time.perf_counter()
        # with a time budget the step limit is usually far away: show elapsed time and rate, not a fake ETA
        progress = Progress(None if cfg.max_minutes else cfg.max_steps, s.step, cfg.progress and self.is_main)
        with stop_at_step_end(self.world == 1) as stop:
            reason = self._fit_loop(t_start, progress, stop)
        if reason == "interrupted":  # the first Ctrl-C, at an update's end: its state, exactly
            progress.close()
            self._save_on_interrupt()
            raise KeyboardInterrupt
        s.stopped = reason
        s.train_seconds = self._seconds_trained()
        self._t_start = time.perf_counter()  # the clock of log records continues from train_seconds
        progress.close()
        if s.step % cfg.eval_every != 0:  # the last steps have not been validated yet
            self._validate_and_save()
        else:
            self.checkpoint(best=False)
        if self.tb is not None:
            self.tb.close()
        return dataclasses.replace(s)

    def _fit_loop(self, t_start: float, progress: Progress, stop: StopRequest) -> str:
        """The updates of `fit` until a limit, or a Ctrl-C (`stop`) at an update's end: returns why it stopped."""
        cfg, s = self.cfg, self.state
        # the window's loss stays a device tensor until a record is written: no wait for the GPU at every step
        window_loss, window_tok, window_t = torch.zeros((), device=self.device), 0, time.perf_counter()
        while (reason := "interrupted" if stop.requested else self._done(t_start)) is None:
            self.sampler.set_epoch(s.epoch)
            batches = self.sampler.batches(s.batch_in_epoch)  # a resumed epoch goes on at its next batch
            loader = self._loader(self.train_data, batches)
            group: list = []
            for batch in loader:
                group.append(batch)
                if len(group) < cfg.accum_steps:
                    continue
                try:
                    loss, ntok = self.train_step(group)
                except KeyboardInterrupt:
                    progress.close()
                    self._save_on_interrupt()
                    raise
                s.batch_in_epoch += len(group)
                group = []
                window_loss, window_tok = window_loss + loss, window_tok + ntok
                s.train_tokens += ntok
                progress.advance()
                if s.step % cfg.log_every == 0 or s.step % cfg.eval_every == 0:
                    elapsed = time.perf_counter() - window_t
                    rec = {"step": s.step, "epoch": s.epoch, "loss": float(window_loss) / max(window_tok, 1),
                           "lr": self.current_lr(), "tokens_per_s": window_tok / max(elapsed, 1e-9) * self.world}
                    progress.report(rec)
                    self.log(rec)
                    window_loss, window_tok, window_t = torch.zeros((), device=self.device), 0, time.perf_counter()
                if s.step % cfg.eval_every == 0:
                    self._validate_and_save()
                    window_t = time.perf_counter()
                if self._done(t_start) or stop.requested:
                    break
            else:
                s.epoch += 1
                s.batch_in_epoch = 0
        return reason

    def close(self) -> None:
        """Ends the process group this trainer started (under torchrun): a gloo group left to the interpreter's
        exit can abort the process ("terminate called without an active exception") after training is done.

        The order matters. The group's C++ destructor joins gloo's worker threads while holding the GIL, and a
        worker that drops the last reference to a finished collective frees its tensors, which needs the GIL:
        a deadlock, seen about once in 40 runs of two CPU ranks (the rank hung at the end of training, stack in
        `c10d::ProcessGroupGloo::~ProcessGroupGloo` joining a thread in `~AsyncBarrierWork`). So the final barrier's
        work is held here until the group is gone (a worker's reference is then never the last), and the DDP
        wrapper, whose reducer also references the group, is dropped first, so that the group is destroyed inside
        `destroy_process_group`, while the barrier's work is still held."""
        if self._owns_group and torch.distributed.is_initialized():
            barrier = torch.distributed.barrier(async_op=True)  # every rank done with its last collective
            barrier.wait()
            self.model = self.raw_model
            gc.collect()  # the DDP wrapper, should a reference cycle hold it
            torch.distributed.destroy_process_group()
            del barrier  # freed here, under the GIL, after the group's worker threads have ended
            self._owns_group = False

    def _save_on_interrupt(self) -> None:
        """Ctrl-C inside a step: drop its partial gradients and checkpoint the last completed step."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.state.step > 0:
            self.checkpoint(best=False)
            log.warning("interrupted: checkpoint at step %d saved; continue with `attnlab train --resume %s`",
                        self.state.step, self.run_dir)

    def _validate_and_save(self) -> None:
        metrics = self.validate()
        self.log({"step": self.state.step, "epoch": self.state.epoch, **metrics})
        summary = ", ".join(f"{k} {v:.2f}" for k, v in metrics.items() if isinstance(v, float))
        if self.is_main:
            log.info("step %d: %s%s", self.state.step, summary, " (best)" if metrics["improved"] else "")
        self.checkpoint(best=metrics["improved"])

