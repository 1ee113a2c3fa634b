"""The one checkpoint format: safetensors for tensors, JSON for everything else; every file written atomically.

A run directory::

    RUN_DIR/config.json               the resolved experiment config
    RUN_DIR/tokenizer/                the tokenizers (attnlab.tokenizers)
    RUN_DIR/metrics.jsonl             one JSON object per log / validation event
    RUN_DIR/checkpoints/step_N.safetensors        model weights at step N
    RUN_DIR/checkpoints/step_N.train.safetensors  optimizer moments and RNG states at step N
    RUN_DIR/checkpoints/step_N.json               trainer state (step, epoch, position, schedule, best)
    RUN_DIR/checkpoints/best.safetensors          weights of the best validation score (+ best.json)
    RUN_DIR/checkpoints/latest.json               names the last complete checkpoint; written last

Nothing is ever unpickled: loading reads tensors with safetensors and metadata with json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from attnlab.errors import AttnlabError
from attnlab.fileio import atomic_write, read_json, write_json


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; a missing, truncated or otherwise corrupt file is an AttnlabError
    naming it."""
    if not path.is_file():
        raise AttnlabError(f"{path}: no such checkpoint")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own SafetensorError, OSError, ValueError ...
        raise AttnlabError(f"{path}: corrupt checkpoint, not a readable safetensors file ({e})") from None
    return tensors, meta


def save_weights(model: nn.Module, path: Path) -> None:
    """Model weights as safetensors. Tied weights (the same tensor under several names) are stored once, the other
    names recorded as aliases in the file's metadata. Every tensor is copied out on its own: cuDNN's RNNs keep their
    weights as views of one flat buffer, which safetensors' `save_model` refuses to write."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, t in _unwrap(model).state_dict().items():
        key = (t.device, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = t.detach().to("cpu", copy=True).contiguous()
    meta = {"attnlab_aliases": json.dumps(aliases, sort_keys=True)}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def load_weights(model: nn.Module, path: Path) -> None:
    """Loads weights written by `save_weights` (or by safetensors' `save_model`) into model; a file that does not
    fit the model is an AttnlabError naming the first missing and unexpected keys."""
    tensors, meta = read_tensors(path)
    if "attnlab_aliases" in meta:
        aliases = json.loads(meta["attnlab_aliases"])
    else:  # save_model's format: each removed duplicate name maps to the name that was kept
        aliases = {k: v for k, v in meta.items() if v in tensors and k not in tensors}
    for alias, name in aliases.items():
        tensors[alias] = tensors[name]
    module = _unwrap(model)
    expected = set(module.state_dict())
    missing, unexpected = expected - set(tensors), set(tensors) - expected
    if missing or unexpected:
        raise AttnlabError(f"{path}: does not fit the model (missing {sorted(missing)[:3]}, "
                           f"unexpected {sorted(unexpected)[:3]})")
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as e:  # shape mismatches
        raise AttnlabError(f"{path}: does not fit the model ({str(e).splitlines()[-1].strip()})") from None


def _unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside DistributedDataParallel / torch.compile wrappers."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Splits an optimizer state_dict into tensors (for safetensors) and JSON-able metadata."""
    sd = optimizer.state_dict()
    tensors, meta_state = {}, {}
    for pid, state in sd["state"].items():
        meta_state[str(pid)] = {}
        for k, v in state.items():
            if torch.is_tensor(v):
                tensors[f"optim.{pid}.{k}"] = v.detach().contiguous().cpu()
            else:
                meta_state[str(pid)][k] = v
    return tensors, {"state": meta_state, "param_groups": sd["param_groups"]}


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict] = {int(pid): dict(v) for pid, v in meta["state"].items()}
    for key, t in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = t
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(ckpt_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    trainer_state: dict, keep_last: int) -> Path:
    """Writes a complete checkpoint for `step`, then points latest.json at it, then prunes old ones."""
    stem = ckpt_dir / f"step_{step:08d}"
    save_weights(model, stem.with_suffix(".safetensors"))
    tensors, optim_meta = optimizer_tensors(optimizer)
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    train_path = Path(f"{stem}.train.safetensors")
    atomic_write(train_path, lambda tmp: save_file(tensors, tmp))
    write_json(stem.with_suffix(".json"), {**trainer_state, "optimizer": optim_meta, "step": step})
    write_json(ckpt_dir / "latest.json", {"step": step, "name": stem.name})
    steps = sorted(int(p.stem.split("_")[1]) for p in ckpt_dir.glob("step_*.json"))
    for old in steps[:-keep_last] if keep_last > 0 else []:
        for suffix in (".safetensors", ".train.safetensors", ".json"):
            Path(f"{ckpt_dir / f'step_{old:08d}'}{suffix}").unlink(missing_ok=True)
    return stem


def resolve_checkpoint(run_dir: Path | str, which: str = "best") -> Path:
    """The weights file of a run: "best" (the best validation score; the last checkpoint if the run never
    validated) or "last" (the checkpoint latest.json names). A run without it is an AttnlabError."""
    run_dir = Path(run_dir)
    ckpt = run_dir / "checkpoints"
    if which not in ("best", "last"):
        raise AttnlabError(f"checkpoint {which!r}: choose best or last")
    if which == "best" and (ckpt / "best.safetensors").is_file():
        return ckpt / "best.safetensors"
    if (ckpt / "latest.json").is_file():
        return ckpt / f"{read_json(ckpt / 'latest.json')['name']}.safetensors"
    raise AttnlabError(f"{run_dir}: no {which} checkpoint (train first, or choose best/last)")


def load_checkpoint(ckpt_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """Restores the checkpoint named by latest.json; returns the trainer state."""
    latest = ckpt_dir / "latest.json"
    if not latest.is_file():
        raise AttnlabError(f"{ckpt_dir}: no checkpoint to resume from (latest.json missing)")
    stem = ckpt_dir / read_json(latest)["name"]
    load_weights(model, stem.with_suffix(".safetensors"))
    state = read_json(stem.with_suffix(".json"))
    tensors, _ = read_tensors(Path(f"{stem}.train.safetensors"))
    if optimizer is not None:
        restore_optimizer(optimizer, tensors, state["optimizer"])
    torch.set_rng_state(tensors["rng.torch"])
    cuda_states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
    return state
