"""The trainer's state (`TrainerState`): what `attnlab.training.trainer.Trainer.fit` needs to continue exactly
where it stopped, saved in the JSON of every checkpoint and read back, checked, on `--resume`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.config import from_dict
from attnlab.core.errors import AttnlabError


@dataclass
class TrainerState:
    """Everything the loop needs to continue exactly where it stopped; saved with every checkpoint.

    best_score: the model-selection score (higher is better: dev BLEU, accuracy, or minus the dev loss) and
    best_step the step that reached it; bad_evals: validations since it last improved; lr_scale: the plateau
    schedule's factor; batch_in_epoch: batches of the current epoch already trained on; stopped: why `fit`
    returned (None while training).
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_score: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    lr_scale: float = 1.0
    train_tokens: int = 0
    train_seconds: float = 0.0
    stopped: str | None = None

    LIMITS: ClassVar[dict] = {"best_score": (-1e30, 1e30), "train_tokens": (0, 2**62), "train_seconds": (0.0, 1e12),
                              "lr_scale": (0.0, 1e9)}

    def __post_init__(self) -> None:
        for name in ("step", "epoch", "batch_in_epoch", "bad_evals", "train_tokens", "train_seconds"):
            if getattr(self, name) < 0:
                raise AttnlabError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.lr_scale <= 0:
            raise AttnlabError(f"lr_scale must be > 0, got {self.lr_scale}")
        if self.best_step is not None and not 0 <= self.best_step <= self.step:
            raise AttnlabError(f"best_step must be in [0, step], got {self.best_step}")

    @classmethod
    def from_dict(cls, data: dict, source: str) -> TrainerState:
        """The state saved in a checkpoint's JSON, every key type- and range-checked (`source` names the file in
        errors); keys of other parts of the checkpoint (optimizer) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return from_dict(cls, {k: v for k, v in data.items() if k in names})
        except AttnlabError as e:
            raise AttnlabError(f"{source}: not a valid trainer state: {e}") from None
