"""Many-to-one RNNs for series regression, with and without the attention layer of the IF3270 notes.

The seed's example (IF3270 "Many to One with Attention", after machinelearningmastery.com's "Adding a custom
attention layer to recurrent neural network in Keras"): the first 1,200 Fibonacci numbers 1, 2, 3, 5, ...
min-max scaled to [0, 1], windows of 20 values predicting the next one, a 70/30 train/test split (shuffled,
as the Keras example: a permutation from numpy's RandomState(13)). Two models:

- ``attention = false``: SimpleRNN(2) -> last state h_T -> Dense(1)                       (8 + 3 = 11 params)
- ``attention = true``:  SimpleRNN(2) -> all states h_1..h_T -> LearnedQueryAttention -> Dense(1)
  (8 + 22 + 3 = 33 params at T = 20), the attention being e_t = tanh(h_t . w + b_t), a = softmax(e),
  c = sum_t a_t h_t (`attnlab.nn.attention.LearnedQueryAttention`).

The Fibonacci numbers are exact Python ints and are scaled in float64 (F_1200 ~ 1e250 overflows float32); the
scaled values below ~1e-38 then underflow to 0 in the float32 model, as they do in Keras. Nearly all windows are
therefore zeros with a zero target: only the last ~30 numbers of the series are visibly non-zero, so the test
MSE is decided by a handful of windows. A second, better-conditioned task, ``sine``, is generated in code: two
sines of periods 25 and 7 plus Gaussian noise, min-max scaled, where every window carries signal.

Training runs through the one `Trainer` with `RegressionTask` (summed squared error, no perplexity); the
training windows are split once more into train and dev (dev picks the checkpoint), and the test MSE of the
best checkpoint is reported.

Shape legend: B batch, T window length (time steps), H hidden size.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.core.config import MAX_SEED, apply_overrides, from_dict, read_config_file
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import write_json
from attnlab.families.base import EvalOptions, LoadedRun
from attnlab.nn.series import SeriesModelConfig, SeriesRNN
from attnlab.training.trainer import TrainConfig, Training

log = logging.getLogger("attnlab")

TASKS = ("fibonacci", "sine")
VARIANTS = {"rnn": False, "attention": True}  # the study's two models by name (`attnlab series --only`, its
# results.json): model.attention off and on


# ---------------------------------------------------------------------------------------------- config
@dataclass
class SeriesDataConfig:
    """The series and its windows. split_seed 13 and shuffle = true reproduce the Keras example's split."""

    task: str = "fibonacci"
    length: int = 1200  # values in the series
    window: int = 20  # T: values in, the next one out
    train_fraction: float = 0.7  # of the windows; the rest is the test set
    shuffle: bool = True  # shuffle the windows before the train/test split
    split_seed: int = 13
    dev_fraction: float = 0.0  # of the training windows, held out as dev; 0: dev is the train set (the seed)
    select: str = "last"  # the weights tested: "last" (the seed's Keras fit) or "best" (lowest dev MSE)
    noise: float = 0.1  # sine: standard deviation of the added Gaussian noise
    data_seed: int = 0  # sine: seed of the noise

    CHOICES: ClassVar[dict] = {"task": TASKS, "select": ("last", "best")}
    # the Fibonacci numbers are exact ints (fib(10**5) has 20,899 digits) and the windows a (length, window) array
    LIMITS: ClassVar[dict] = {"length": (4, 10**5), "window": (1, 1000), "train_fraction": (0.0, 1.0),
                              "split_seed": (0, MAX_SEED), "dev_fraction": (0.0, 1.0), "noise": (0.0, 1e6),
                              "data_seed": (0, MAX_SEED)}

    def __post_init__(self) -> None:
        if self.window < 1 or self.length < self.window + 3:
            raise AttnlabError(f"series.length ({self.length}) must exceed series.window ({self.window}) + 2")
        if not 0.0 < self.train_fraction < 1.0 or not 0.0 <= self.dev_fraction < 1.0:
            raise AttnlabError(f"series.train_fraction ({self.train_fraction}) must be in (0, 1) and "
                               f"series.dev_fraction ({self.dev_fraction}) in [0, 1)")
        if self.select == "best" and self.dev_fraction == 0.0:
            raise AttnlabError("series.select = 'best' needs a held-out dev set: set series.dev_fraction > 0")


def _series_train_defaults() -> TrainConfig:
    # the seed's Keras fit: Adam(1e-3), MSE, 30 epochs, Keras' default batch of 32 windows, no clipping
    return TrainConfig(max_steps=10**9, max_epochs=30, max_tokens=32, lr=1e-3, clip_norm=0.0, label_smoothing=0.0,
                       eval_every=100, log_every=100, keep_last=1, progress=False)


@dataclass
class SeriesExperimentConfig:
    """A series config file: [series] (the data), [model], [train] (train.max_tokens = windows per batch)."""

    series: SeriesDataConfig = field(default_factory=SeriesDataConfig)
    model: SeriesModelConfig = field(default_factory=SeriesModelConfig)
    train: TrainConfig = field(default_factory=_series_train_defaults)


def complete_series(raw: dict) -> dict:
    """A new series run's raw config with the seed's Keras fit as its training defaults (`_series_train_defaults`)
    under the keys it sets."""
    train = raw.get("train", {})
    if not isinstance(train, dict):
        return raw  # the config check names the section
    return {**raw, "train": {**dataclasses.asdict(_series_train_defaults()), **train}}


def load_series_config(path: Path | str | None, overrides: list[str] | None = None) -> SeriesExperimentConfig:
    data = read_config_file(path) if path is not None else {}
    return from_dict(SeriesExperimentConfig, complete_series(apply_overrides(data, list(overrides or []))))


def is_series_config(raw: dict) -> bool:
    """Whether a raw config dict is a series experiment (it has a [series] table)."""
    return isinstance(raw.get("series"), dict)


# ---------------------------------------------------------------------------------------------- data
def fibonacci(n: int) -> list[int]:
    """The first n Fibonacci numbers of the seed, 1, 2, 3, 5, 8, ... as exact ints."""
    out, a, b = [], 1, 2
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out


def min_max_scale(values: list[int] | list[float]) -> np.ndarray:
    """(v - min) / (max - min) in float64; exact ints are divided as ints (correctly rounded, no overflow)."""
    lo, hi = min(values), max(values)
    if hi == lo:
        raise AttnlabError("cannot min-max scale a constant series")
    return np.array([(v - lo) / (hi - lo) for v in values], dtype=np.float64)


def sine_series(n: int, noise: float, seed: int) -> np.ndarray:
    """sin(2 pi t / 25) + 0.5 sin(2 pi t / 7 + 1) + noise * N(0, 1), t = 0..n-1, min-max scaled (float64)."""
    t = np.arange(n, dtype=np.float64)
    x = np.sin(2 * np.pi * t / 25) + 0.5 * np.sin(2 * np.pi * t / 7 + 1.0)
    x = x + noise * np.random.default_rng(seed).standard_normal(n)
    return min_max_scale(list(x))


def make_series(cfg: SeriesDataConfig) -> np.ndarray:
    """The scaled series of the config, float64 (length,)."""
    if cfg.task == "fibonacci":
        return min_max_scale(fibonacci(cfg.length))
    return sine_series(cfg.length, cfg.noise, cfg.data_seed)


def windows(series: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
    """All windows x_i..x_{i+T-1} -> x_{i+T}: X (N, T), y (N,), N = len(series) - T."""
    N = len(series) - T
    X = np.stack([series[i:i + T] for i in range(N)])  # (N, T)
    return X, series[T:].copy()


class SeriesDataset(torch.utils.data.Dataset):
    """Fixed-size windows: each example costs 1, so the trainer's max_tokens is the batch size."""

    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        self.X = torch.tensor(X, dtype=torch.float32)  # (N, T)
        self.y = torch.tensor(y, dtype=torch.float32)  # (N,)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.X[i], self.y[i]

    def lengths(self) -> list[int]:
        return [1] * len(self.y)


@dataclass
class SeriesSplits:
    train: SeriesDataset
    dev: SeriesDataset
    test: SeriesDataset
    series: np.ndarray  # the scaled series, float64


def make_splits(cfg: SeriesDataConfig) -> SeriesSplits:
    """Windows split train/test by cfg.train_fraction (after a RandomState(split_seed) permutation if shuffle),
    then the last dev_fraction of the training windows (in that order) held out as dev; with dev_fraction 0
    the dev set is the training set (the trainer's dev loss is then the training MSE)."""
    series = make_series(cfg)
    X, y = windows(series, cfg.window)
    N = len(y)
    order = np.random.RandomState(cfg.split_seed).permutation(N) if cfg.shuffle else np.arange(N)
    n_train = int(cfg.train_fraction * N)
    n_dev = round(cfg.dev_fraction * n_train)
    if n_train - n_dev < 1 or N - n_train < 1:
        raise AttnlabError(f"series: {N} windows are too few for train_fraction {cfg.train_fraction} and "
                           f"dev_fraction {cfg.dev_fraction}")
    tr, dv, te = order[:n_train - n_dev], order[n_train - n_dev:n_train], order[n_train:]
    train = SeriesDataset(X[tr], y[tr])
    return SeriesSplits(train, SeriesDataset(X[dv], y[dv]) if n_dev else train, SeriesDataset(X[te], y[te]), series)


# ---------------------------------------------------------------------------------------------- task
@dataclass
class SeriesBatch:
    x: Tensor  # (B, T)
    y: Tensor  # (B,)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SeriesBatch:
        return SeriesBatch(self.x.to(device, non_blocking=non_blocking), self.y.to(device, non_blocking=non_blocking))


class RegressionTask:
    """The trainer's Task for series regression: summed squared error over the batch's windows."""

    perplexity = False

    @staticmethod
    def collate(examples: list[tuple[Tensor, Tensor]]) -> SeriesBatch:
        return SeriesBatch(torch.stack([x for x, _ in examples]), torch.stack([y for _, y in examples]))

    @staticmethod
    def loss(model: nn.Module, batch: SeriesBatch, label_smoothing: float) -> tuple[Tensor, int]:
        pred, _ = model(batch.x)  # (B,)
        return ((pred.float() - batch.y) ** 2).sum(), batch.y.numel()


def baselines(splits: SeriesSplits) -> dict[str, float]:
    """Test MSE of three model-free predictors, for scale: zero, the training targets' mean, the window's last
    value (persistence)."""
    y, last = splits.test.y.double(), splits.test.X[:, -1].double()
    return {"zero": float((y ** 2).mean()), "train_mean": float(((y - splits.train.y.double().mean()) ** 2).mean()),
            "last_value": float(((y - last) ** 2).mean())}


@torch.no_grad()
def mse(model: nn.Module, data: SeriesDataset) -> float:
    """Mean squared error of the model on a dataset, accumulated in float64."""
    model.eval()
    pred, _ = model(data.X.to(next(model.parameters()).device))
    return float(((pred.double().cpu() - data.y.double()) ** 2).mean())


# ---------------------------------------------------------------------------------------------- family
def build_series_model(cfg: SeriesExperimentConfig, tokenizers: None = None) -> SeriesRNN:
    return SeriesRNN(cfg.model, cfg.series.window)


def series_training(cfg: SeriesExperimentConfig, splits: SeriesSplits, tokenizers: None, model: SeriesRNN
                    ) -> Training:
    """Summed squared error over windows (train.max_tokens = windows per batch); selection on dev MSE."""
    return Training(RegressionTask(), splits.train, splits.dev, dev_eval=None, d_model=cfg.model.hidden_dim,
                    sizes=f"train windows {len(splits.train):,}, dev {len(splits.dev):,}, test {len(splits.test):,}")


def series_summary_inputs(cfg: SeriesExperimentConfig, tokenizers: None, src_len: int, tgt_len: int
                          ) -> tuple[tuple[Tensor, ...], str]:
    """Two windows of the configured length (the series model has no vocabulary)."""
    T = cfg.series.window
    return (torch.rand(2, T),), (f"{cfg.model.cell}, hidden {cfg.model.hidden_dim}, attention "
                                 f"{'on' if cfg.model.attention else 'off'}; dummy batch B=2, T={T}")


def evaluate_series(run: LoadedRun, split: str, options: EvalOptions) -> dict:
    """MSE of the run's weights on a split (and on the others, for scale); writes RUN_DIR/eval/series_<split>.json."""
    splits = make_splits(run.cfg.series)
    result = {"split": split, "checkpoint": run.checkpoint, "windows": len(getattr(splits, split)),
              **{f"{name}_mse": mse(run.model, getattr(splits, name)) for name in ("train", "dev", "test")},
              "baselines": baselines(splits)}
    result["mse"] = result[f"{split}_mse"]
    write_json(run.run_dir / "eval" / f"series_{split}.json", result)
    return result


def format_series_eval(result: dict) -> str:
    return (f"{result['split']}: {result['windows']:,} windows ({result['checkpoint']} checkpoint): MSE "
            f"{result['mse']:.4e}; baselines " + ", ".join(f"{k} {v:.4e}" for k, v in result["baselines"].items()))
