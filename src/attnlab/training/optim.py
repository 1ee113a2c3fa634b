"""What the optimizer steps with: its parameter groups (`optimizer_groups`: weight decay where nanoGPT puts it), the
optimizer itself (`make_optimizer`) and the learning-rate schedules (`lr_factor`: constant with warm-up, inverse
square root, the paper's noam).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def optimizer_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Parameter groups for AdamW (as nanoGPT's `configure_optimizers`): weight decay on the weight matrices of
    linear, convolution and recurrent layers; none on biases, normalization gains and embeddings (an output layer
    tied to an embedding counts as the embedding). Tied parameters appear once; frozen ones not at all."""
    no_decay: set[int] = set()
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.RMSNorm)):
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    params = [p for p in model.parameters() if p.requires_grad]  # each tensor once, even when tied
    decay = [p for p in params if id(p) not in no_decay and p.dim() >= 2]
    rest = [p for p in params if id(p) in no_decay or p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, name: str, lr: float, betas: tuple[float, float], weight_decay: float,
                   fused: bool = False) -> torch.optim.Optimizer:
    """Adam or AdamW ("adam" | "adamw", train.optimizer) over `optimizer_groups`; fused: one kernel for all the
    parameters (CUDA and the CPU, where the trainer uses it: 3.2x as fast as torch's default for the small
    Transformer's 6.6 M parameters on Xeon-AMX, `benchmarks/optimizer_bench.py`)."""
    opt_cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return opt_cls(optimizer_groups(model, weight_decay), lr=lr, betas=betas, **({"fused": True} if fused else {}))


def lr_factor(schedule: str, warmup_steps: int, step: int, d_model: int = 512) -> float:
    """The multiplier of train.lr at optimizer step `step` (1-based) under train.schedule and train.warmup_steps.

    constant: 1 (linear warmup if warmup_steps); inverse_sqrt: min(step/warmup, sqrt(warmup/step));
    noam (Vaswani et al. 2017, eq. 3): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times lr;
    plateau: 1, scaled by the trainer when dev stops improving.
    """
    step = max(step, 1)
    w = max(warmup_steps, 1)
    if schedule == "inverse_sqrt":
        return min(step / w, math.sqrt(w / step))
    if schedule == "noam":
        return d_model ** -0.5 * min(step ** -0.5, step * w ** -1.5)
    return min(1.0, step / w) if warmup_steps else 1.0
