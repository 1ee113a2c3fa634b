"""The one checkpoint format: safetensors for tensors, JSON for everything else; every file written atomically.

A run's checkpoint folder::

    RUN_DIR/checkpoints/step_N.safetensors        model weights at step N (N: 8 digits)
    RUN_DIR/checkpoints/step_N.train.safetensors  optimizer moments and RNG states at step N
    RUN_DIR/checkpoints/step_N.json               trainer state (step, epoch, position, schedule, best); written
                                                  after the two tensor files, so it marks the step complete
    RUN_DIR/checkpoints/latest.json               {"name": "step_N", "step": N}: the last complete checkpoint
    RUN_DIR/checkpoints/best.json                 {"name": "step_M", "step": M, "score": s}: the best one

Saving a checkpoint is a transaction (`save_checkpoint`): the three step files, then latest.json, then (if the
step is the best so far) best.json, then pruning, each file written to a temporary name, flushed and renamed into
place. A kill at any point therefore leaves latest.json and best.json naming complete files whose contents belong
to the step they name; pruning never deletes a step a pointer names, and a pointer may name only a `step_N` of
its own folder. Nothing is written through a symlink: a linked file is replaced, a linked checkpoint folder
refused (the run folder is the writes' `root`, `attnlab.core.fileio.atomic_write`). `recover` (run before a resume)
removes what a kill left behind: temporary files and the files of steps after latest.

Runs written before best.json became a pointer have best.safetensors and a best.json without "name"; they load
as before.

Nothing is ever unpickled: loading reads tensors with safetensors and metadata with json.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write, read_json, write_json

STEP_NAME = re.compile(r"step_(\d{8})")
STEP_FILE = re.compile(r"step_(\d{8})(\.safetensors|\.train\.safetensors|\.json)")
STEP_SUFFIXES = (".safetensors", ".train.safetensors", ".json")
# the floating-point types a weights or optimizer file may hold: converted to the model's type when loaded. Others
# (float8 variants, complex, integers for float parameters) are refused: torch cannot even check them for NaN.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
QUANTIZATIONS = ("float32", "bfloat16", "int8")  # how `save_weights` may store a model (compact runs)
SCALE_SUFFIX = ".int8_scale"  # the per-row scales of an int8 matrix, stored beside it
# the largest per-row scale a compact run may hold: a row whose largest |weight| is 127 million. The writer's scales
# are max|row| / 127 (1 for an all-zero row); a zero, negative, infinite or huge one is a damaged or forged file
MAX_INT8_SCALE = 1e6


# a safetensors header (JSON: each tensor's name, dtype, shape and offsets) larger than this is refused before it is
# parsed: the header of a 10,000-tensor model is about 1 MB, and one listing a million empty tensors took 2.4 GB
MAX_HEADER_BYTES = 16 * 2**20
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}


def read_header(path: Path) -> tuple[int, dict, int]:
    """(n, header, size) of a safetensors file: the header's length in bytes, its JSON object (read alone) and the
    file's size. The length is bounded (MAX_HEADER_BYTES) and checked against the size before the JSON is read; an
    AttnlabError names the file and the problem."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
            raise AttnlabError(f"{path}: corrupt checkpoint, not a safetensors file (a header of {n:,} bytes in a file "
                               f"of {size:,}; at most {MAX_HEADER_BYTES:,})")
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            header = None
    if not isinstance(header, dict):
        raise AttnlabError(f"{path}: corrupt checkpoint, its safetensors header is not a JSON object")
    return n, header, size


def check_header(path: Path) -> None:
    """Reads a safetensors file's header alone (`read_header`) and checks it against the file before any tensor is
    built: every tensor's bytes (shape x dtype size) equal to its offsets' span and inside the data. An AttnlabError
    names the file and the first problem."""
    n, header, size = read_header(path)
    data = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            shape, (begin, end) = [int(d) for d in entry["shape"]], entry["data_offsets"]
            width = DTYPE_BYTES[entry["dtype"]]
            ok = all(d >= 0 for d in shape) and 0 <= begin <= end <= data and math.prod(shape) * width == end - begin
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise AttnlabError(f"{path}: corrupt checkpoint, tensor {name[:80]!r} of the safetensors header does not "
                               "fit the file (dtype, shape and offsets)")


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; a missing, truncated or otherwise corrupt file is an AttnlabError
    naming it. The header is checked first (`check_header`), so a forged one allocates nothing."""
    if not path.is_file():
        raise AttnlabError(f"{path}: no such checkpoint")
    check_header(path)
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own SafetensorError, OSError, ValueError ...
        raise AttnlabError(f"{path}: corrupt checkpoint, not a readable safetensors file ({e})") from None
    return tensors, meta


def save_weights(model: nn.Module, path: Path, root: Path | None = None, quantization: str = "float32") -> None:
    """Model weights as safetensors. Tied weights (the same tensor under several names) are stored once, the other
    names recorded as aliases in the file's metadata. Every tensor is copied out on its own: cuDNN's RNNs keep their
    weights as views of one flat buffer, which safetensors' `save_model` refuses to write. `root`: the run folder
    (`attnlab.core.fileio.atomic_write`). `quantization` (one of QUANTIZATIONS): "float32" keeps the model's
    types; "bfloat16" stores every floating tensor in bf16; "int8" stores each matrix (2 or more dimensions) as int8
    with one float32 scale per row (`quantize_int8`) and vectors in bf16. `load_weights` reads all three into the
    model's own types."""
    if quantization not in QUANTIZATIONS:
        raise AttnlabError(f"quantization {quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
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
    if quantization != "float32":
        scaled = []
        for name in list(tensors):
            t = tensors[name]
            if not t.is_floating_point():
                continue
            if quantization == "int8" and t.dim() >= 2 and t.numel():
                tensors[name], tensors[name + SCALE_SUFFIX] = quantize_int8(t)
                scaled.append(name)
            else:
                tensors[name] = t.to(torch.bfloat16)
        meta["attnlab_quantization"] = json.dumps({"kind": quantization, "int8": sorted(scaled)})
    def write(tmp: str) -> None:
        save_file(tensors, tmp, metadata=meta)
        sort_metadata(Path(tmp))

    atomic_write(path, write, root)


def sort_metadata(path: Path) -> None:
    """Rewrites, in place, a safetensors header with its metadata keys sorted, so that the same weights and metadata
    always give the same bytes (safetensors writes the metadata in a random order on each save: its issue #584). The
    header keeps its length (the same JSON, reordered, padded with spaces as the format allows); the tensors' entries
    and data are not touched."""
    n, header, _ = read_header(path)
    meta = header.get("__metadata__")
    if not meta:
        return
    header["__metadata__"] = dict(sorted(meta.items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > n:  # cannot happen for the same JSON; the file is then left as safetensors wrote it
        return
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(text + b" " * (n - len(text)))


def quantize_int8(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one scale per row (dimension 0; the other dimensions flattened): q = round(t / s) with
    s = max|row| / 127, so t ~ q * s with an error of at most s / 2 per element. Returns (q, s), q int8 of t's
    shape, s float32 (rows,). An all-zero row gets s = 1 (q = 0)."""
    rows = t.detach().float().reshape(t.shape[0], -1)  # (R, C)
    scale = rows.abs().amax(dim=1) / 127.0  # (R,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(rows / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.reshape(t.shape).contiguous(), scale.contiguous()


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 tensor that `quantize_int8` stored as (q, scale)."""
    return (q.float().reshape(q.shape[0], -1) * scale.float()[:, None]).reshape(q.shape)


def _dequantized(tensors: dict[str, torch.Tensor], meta: dict[str, str], path: Path) -> dict[str, torch.Tensor]:
    """tensors with the int8 matrices of a quantized file (`save_weights`) turned back into float32 and their scales
    removed; a file whose quantization record does not fit its tensors is an AttnlabError."""
    if "attnlab_quantization" not in meta:
        return tensors
    try:
        record = json.loads(meta["attnlab_quantization"])
    except (ValueError, RecursionError):
        record = None
    names = record.get("int8") if isinstance(record, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise AttnlabError(f"{path}: metadata key attnlab_quantization must be {{\"kind\": ..., \"int8\": [names]}}")
    out = dict(tensors)
    for name in names:
        q, scale = out.get(name), out.pop(name + SCALE_SUFFIX, None)
        if q is None or scale is None or q.dtype != torch.int8 or q.dim() < 2 or scale.shape != (q.shape[0],) \
                or not scale.is_floating_point():
            raise AttnlabError(f"{path}: int8 tensor {name} needs an int8 matrix and a float scale per row "
                               f"({name}{SCALE_SUFFIX})")
        if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()) or float(scale.max()) > MAX_INT8_SCALE:
            raise AttnlabError(f"{path}: int8 tensor {name} has a scale that `quantize_int8` never writes (each must "
                               f"be finite, above 0 and at most {MAX_INT8_SCALE:g})")
        out[name] = dequantize_int8(q, scale)
    return out


def load_weights(model: nn.Module, path: Path) -> None:
    """Loads weights written by `save_weights` (or by safetensors' `save_model`) into model; a file that does not
    fit the model is an AttnlabError naming the first missing and unexpected keys."""
    tensors, meta = read_tensors(path)
    tensors = _dequantized(tensors, meta, path)
    if "attnlab_aliases" in meta:
        try:
            aliases = json.loads(meta["attnlab_aliases"])
        except (ValueError, RecursionError):  # JSON syntax, an integer of more than 4,300 digits, deep nesting
            aliases = None
        if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str) and v in tensors
                                                    for k, v in aliases.items()):
            raise AttnlabError(f"{path}: metadata key attnlab_aliases must map tensor names to stored tensors")
    else:  # save_model's format: each removed duplicate name maps to the name that was kept
        aliases = {k: v for k, v in meta.items() if v in tensors and k not in tensors}
    for alias, name in aliases.items():
        tensors[alias] = tensors[name]
    module = _unwrap(model)
    own = module.state_dict()
    missing, unexpected = set(own) - set(tensors), set(tensors) - set(own)
    if missing or unexpected:
        raise AttnlabError(f"{path}: does not fit the model (missing {sorted(missing)[:3]}, "
                           f"unexpected {sorted(unexpected)[:3]})")
    for name, t in tensors.items():
        if own[name].is_floating_point():
            if t.dtype not in FLOAT_DTYPES:
                raise AttnlabError(f"{path}: tensor {name} is {t.dtype}; weights must be one of "
                                   f"{', '.join(str(d) for d in FLOAT_DTYPES)} (the model needs {own[name].dtype})")
            tensors[name] = t = t.to(own[name].dtype)
            if not bool(torch.isfinite(t).all()):
                raise AttnlabError(f"{path}: tensor {name} holds NaN or infinite values (in {own[name].dtype})")
        elif t.dtype != own[name].dtype:
            raise AttnlabError(f"{path}: tensor {name} is {t.dtype}, the model needs {own[name].dtype}")
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


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict,
                      source: str = "checkpoint") -> None:
    """Restores the per-parameter state (moments, step counts) saved by `optimizer_tensors`. The hyperparameters
    stay the optimizer's own (they come from the run's config); the saved groups must have the same sizes, and
    every saved tensor the shape of its parameter, finite. A state that does not fit is an AttnlabError naming
    `source`."""
    own = optimizer.state_dict()
    try:
        sizes = [len(g["params"]) for g in meta["param_groups"]]
        if sizes != [len(g["params"]) for g in own["param_groups"]]:
            raise ValueError(f"parameter groups of sizes {sizes}, the optimizer has "
                             f"{[len(g['params']) for g in own['param_groups']]}")
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state: dict[int, dict] = {}
        for pid, values in meta["state"].items():
            if not isinstance(values, dict) or not 0 <= int(pid) < len(params):
                raise ValueError(f"state of parameter {pid!r}")
            state[int(pid)] = dict(values)
        for key, t in tensors.items():
            if key.startswith("optim."):
                _, pid, name = key.split(".", 2)
                param = params[int(pid)]
                if t.dtype not in FLOAT_DTYPES or (t.dim() and t.shape != param.shape) or not bool(t.isfinite().all()):
                    raise ValueError(f"tensor {key} ({t.dtype}, {tuple(t.shape)}) for a parameter of shape "
                                     f"{tuple(param.shape)}")
                state.setdefault(int(pid), {})[name] = t
        if isinstance(optimizer, torch.optim.Adam):  # AdamW too: a state is empty (not stepped yet) or complete
            for pid, values in state.items():
                missing = {"step", "exp_avg", "exp_avg_sq"} - set(values)
                if values and missing:
                    raise ValueError(f"the state of parameter {pid} lacks {', '.join(sorted(missing))}")
        optimizer.load_state_dict({"state": state, "param_groups": own["param_groups"]})
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise AttnlabError(f"{source}: the optimizer state does not fit this model's optimizer ({e})") from None


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def read_pointer(ckpt_dir: Path, name: str) -> dict | None:
    """latest.json / best.json of a checkpoint folder, validated: "name" is a `step_N` of this folder and "step"
    is its N (so a pointer can never make attnlab read a file elsewhere); None when the file is absent. The legacy
    best.json without "name" is returned as it is."""
    path = ckpt_dir / name
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise AttnlabError(f"{path}: expected a JSON object with keys name and step")
    if name == "best.json" and "name" not in data:  # legacy: best.safetensors beside it
        return data
    match = STEP_NAME.fullmatch(data.get("name")) if isinstance(data.get("name"), str) else None
    if match is None:
        raise AttnlabError(f"{path}: key 'name' must be a checkpoint of this folder (step_ and 8 digits), got "
                           f"{data.get('name')!r}")
    if type(data.get("step")) is not int or data["step"] != int(match.group(1)):
        raise AttnlabError(f"{path}: key 'step' must be {int(match.group(1))} (the step of {data['name']}), got "
                           f"{data.get('step')!r}")
    return data


def _step_files(ckpt_dir: Path) -> dict[int, list[Path]]:
    files: dict[int, list[Path]] = {}
    for p in ckpt_dir.iterdir():
        m = STEP_FILE.fullmatch(p.name)
        if m:
            files.setdefault(int(m.group(1)), []).append(p)
    return files


def complete_steps(ckpt_dir: Path, latest: int) -> list[int]:
    """The steps up to `latest` whose three files are all there, oldest first."""
    return sorted(n for n, paths in _step_files(ckpt_dir).items() if n <= latest and
                  {p.name for p in paths} >= {step_name(n) + suffix for suffix in STEP_SUFFIXES})


def average_into(model: nn.Module, ckpt_dir: Path, last: int) -> list[int]:
    """Loads into `model` the element-wise mean of the weights of the `last` newest complete checkpoints of
    `ckpt_dir` (up to the one latest.json names), as Vaswani et al. (2017, sec. 6.1) did with their last 5 or 20
    checkpoints. Each file is loaded and checked by `load_weights`; the sum is kept in float64. Integer buffers (none
    in attnlab's models) would be taken from the newest. Returns the averaged steps, oldest first; fewer than `last`
    complete checkpoints is an AttnlabError saying how many there are (train.keep_last keeps that many)."""
    latest = read_pointer(ckpt_dir, "latest.json") if ckpt_dir.is_dir() else None
    if latest is None:
        raise AttnlabError(f"{ckpt_dir}: no checkpoints to average (latest.json missing)")
    if last < 1:
        raise AttnlabError(f"--last {last}: average at least 1 checkpoint")
    steps = complete_steps(ckpt_dir, latest["step"])[-last:]
    if len(steps) < last:
        raise AttnlabError(f"{ckpt_dir}: holds {len(steps)} complete checkpoint(s), not {last} (train with "
                           f"train.keep_last >= {last} to keep them)")
    module = _unwrap(model)
    total: dict[str, torch.Tensor] = {}
    for n in steps:
        load_weights(module, ckpt_dir / f"{step_name(n)}.safetensors")
        for name, t in module.state_dict().items():
            if t.is_floating_point():
                total[name] = total[name] + t.double() if name in total else t.double()
    with torch.no_grad():
        own = module.state_dict()
        for name, t in total.items():
            own[name].copy_((t / len(steps)).to(own[name].dtype))
    return steps


def save_checkpoint(ckpt_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    trainer_state: dict, keep_last: int, best: bool = False) -> Path:
    """Writes the checkpoint of `step` as a transaction: weights, optimizer/RNG tensors, trainer state (each
    atomic), then latest.json, then, if `best`, best.json (with trainer_state["best_score"]), then prunes: of the
    steps up to latest, the keep_last newest stay, and so do the steps latest and best name. The run folder
    (`ckpt_dir`'s parent) is the writes' root: a checkpoint folder that is a symlink is refused."""
    root = ckpt_dir.parent
    stem = ckpt_dir / step_name(step)
    save_weights(model, stem.with_suffix(".safetensors"), root)
    tensors, optim_meta = optimizer_tensors(optimizer)
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    atomic_write(Path(f"{stem}.train.safetensors"), lambda tmp: save_file(tensors, tmp), root)
    write_json(stem.with_suffix(".json"), {**trainer_state, "optimizer": optim_meta, "step": step}, root)
    write_latest(ckpt_dir, step, root)
    if best:
        write_best(ckpt_dir, step, trainer_state.get("best_score"))
    prune(ckpt_dir, keep_last)
    return stem


def write_latest(ckpt_dir: Path, step: int, root: Path) -> None:
    """Points latest.json at the (complete) checkpoint of `step`: the one writer of latest.json. `root`: the run
    folder the write stays inside (`attnlab.core.fileio.atomic_write`)."""
    write_json(ckpt_dir / "latest.json", {"step": step, "name": step_name(step)}, root)


def write_weights_run(folder: Path, model: nn.Module, step: int = 0, quantization: str = "float32") -> Path:
    """The checkpoints of a run that holds weights only (an imported model, a compact run): `model`'s weights as
    the checkpoint of `step`, which latest.json and best.json both name. `folder`: the run folder being written
    (its staging copy). Returns the weights file."""
    ckpt = folder / "checkpoints"
    weights = ckpt / f"{step_name(step)}.safetensors"
    save_weights(model, weights, folder, quantization)
    write_latest(ckpt, step, folder)
    write_best(ckpt, step, None)
    return weights


def write_best(ckpt_dir: Path, step: int, score: float | None) -> None:
    """Points best.json at the (complete) checkpoint of `step`; a legacy best.safetensors goes."""
    write_json(ckpt_dir / "best.json", {"step": step, "name": step_name(step), "score": score}, ckpt_dir.parent)
    (ckpt_dir / "best.safetensors").unlink(missing_ok=True)


def prune(ckpt_dir: Path, keep_last: int) -> None:
    """Deletes the checkpoints no longer needed: every step up to latest except the keep_last newest complete
    ones and the steps latest.json and best.json name. Steps after latest (a write that a kill interrupted) are
    `recover`'s to remove."""
    latest = read_pointer(ckpt_dir, "latest.json")
    if latest is None:
        return
    best = read_pointer(ckpt_dir, "best.json")
    files = _step_files(ckpt_dir)
    complete = complete_steps(ckpt_dir, latest["step"])
    keep = set(complete[-keep_last:] if keep_last > 0 else []) | {latest["step"]}
    if best is not None and "name" in best:
        keep.add(best["step"])
    for n, paths in sorted(files.items()):
        if n <= latest["step"] and n not in keep:
            for path in sorted(paths, key=lambda p: p.suffix == ".json", reverse=True):  # the state file first
                path.unlink(missing_ok=True)


def recover(ckpt_dir: Path) -> list[Path]:
    """Makes a checkpoint folder consistent again after a kill, before training resumes: removes temporary files
    of interrupted writes (`.<name>.*`), the files of steps after the one latest.json names, and a best.json that
    names a step whose files are gone. Returns the removed paths."""
    latest = read_pointer(ckpt_dir, "latest.json")
    if latest is None:
        raise AttnlabError(f"{ckpt_dir}: no checkpoint to resume from (latest.json missing)")
    removed = [p for p in ckpt_dir.iterdir() if p.name.startswith(".") and p.is_file()]
    for n, paths in _step_files(ckpt_dir).items():
        if n > latest["step"]:
            removed += paths
    best = read_pointer(ckpt_dir, "best.json")
    if best is not None and "name" in best and (best["step"] > latest["step"] or
                                                not (ckpt_dir / f"{best['name']}.safetensors").is_file()):
        removed.append(ckpt_dir / "best.json")
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def resolve_checkpoint(run_dir: Path | str, which: str = "best") -> Path:
    """The weights file of a run: "best" (the best validation score; the last checkpoint if the run never
    validated) or "last" (the checkpoint latest.json names). A run without it is an AttnlabError."""
    run_dir = Path(run_dir)
    ckpt = run_dir / "checkpoints"
    if which not in ("best", "last"):
        raise AttnlabError(f"checkpoint {which!r}: choose best or last")
    if which == "best" and ckpt.is_dir():
        best = read_pointer(ckpt, "best.json")
        if best is not None and "name" in best:
            return ckpt / f"{best['name']}.safetensors"
        if (ckpt / "best.safetensors").is_file():  # a run written before best.json became a pointer
            return ckpt / "best.safetensors"
    latest = read_pointer(ckpt, "latest.json") if ckpt.is_dir() else None
    if latest is not None:
        return ckpt / f"{latest['name']}.safetensors"
    raise AttnlabError(f"{run_dir}: holds no checkpoint (checkpoints/latest.json missing); train it first")


def load_checkpoint(ckpt_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """Restores the checkpoint named by latest.json; returns the trainer state."""
    latest = read_pointer(ckpt_dir, "latest.json") if ckpt_dir.is_dir() else None
    if latest is None:
        raise AttnlabError(f"{ckpt_dir}: no checkpoint to resume from (latest.json missing)")
    stem = ckpt_dir / latest["name"]
    load_weights(model, stem.with_suffix(".safetensors"))
    state = read_json(stem.with_suffix(".json"))
    if not isinstance(state, dict) or not isinstance(state.get("optimizer"), dict) \
            or state.get("step") != latest["step"]:
        raise AttnlabError(f"{stem.with_suffix('.json')}: not the trainer state of step {latest['step']} (keys step "
                           "and optimizer)")
    tensors, _ = read_tensors(Path(f"{stem}.train.safetensors"))
    if optimizer is not None:
        restore_optimizer(optimizer, tensors, state["optimizer"], f"{stem}.train.safetensors / {stem.name}.json")
    rng = tensors.get("rng.torch")
    if rng is None or rng.dtype != torch.uint8 or rng.shape != torch.get_rng_state().shape:
        raise AttnlabError(f"{stem}.train.safetensors: tensor rng.torch is missing or not a CPU generator state")
    torch.set_rng_state(tensors["rng.torch"])
    cuda_states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
    return state
