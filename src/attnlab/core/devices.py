"""The device a run computes on and in what precision, for training and decoding alike: the devices this machine
and torch build have (`available_devices`, `resolve_device`), the CPU's feature flags (`cpu_flags`), whether a
device computes bf16 natively (`native_bf16`), and the autocast dtype of an amp setting (`amp_dtype`,
`autocast`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from attnlab.core.errors import AttnlabError

DEVICES = ("auto", "cpu", "cuda", "mps")  # the device names train.device and --device take ("cuda:N" too)


def available_devices() -> list[str]:
    """The devices this torch build can use on this machine: cpu, cuda:N, mps, xpu:N."""
    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)]
    if torch.backends.mps.is_available():
        devices.append("mps")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        devices += [f"xpu:{i}" for i in range(xpu.device_count())]
    return devices


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (/proc/cpuinfo); empty where it does not."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matrix products natively: a CUDA GPU with bf16 (Ampere or later), a CPU
    with AVX512_BF16 or AMX-BF16 (detected from the CPU's flags, not guessed from its name). Elsewhere bf16
    autocast runs, but through conversions that make it slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    return False


def amp_dtype(amp: str, device: torch.device, key: str = "train.amp") -> torch.dtype | None:
    """The autocast dtype of train.amp (or decode.amp, named by `key` in errors) on `device` (None: fp32).
    "auto": bf16 where `native_bf16`, else fp32; "bf16": bf16 on CUDA or the CPU; "fp16": CUDA only (with a
    gradient scaler)."""
    if amp == "none" or (amp == "auto" and not native_bf16(device)):
        return None
    if device.type not in ("cuda", "cpu"):
        if amp == "auto":
            return None
        raise AttnlabError(f"{key} = {amp!r} runs on CUDA or the CPU, not {device.type}; use none")
    if amp == "fp16" and device.type != "cuda":
        raise AttnlabError(f"{key} = 'fp16' needs a CUDA GPU (and a gradient scaler); on the CPU use bf16 or auto")
    return torch.float16 if amp == "fp16" else torch.bfloat16


def autocast(dtype: torch.dtype | None, device: torch.device) -> contextlib.AbstractContextManager:
    """torch.autocast on `device` in `dtype` (an `amp_dtype`), or a context that changes nothing for None."""
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def resolve_device(name: str) -> torch.device:
    """The torch device of a device name (train.device, --device): "auto" is "cuda" when CUDA is available, else
    the CPU; "cuda" is the GPU of this process (LOCAL_RANK); "cpu", "cuda", "cuda:N", "mps", "xpu" must exist on
    this machine and in this torch build, or it is an AttnlabError naming the devices there are."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise AttnlabError(f"device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return torch.device("cpu")
    available = available_devices()
    wanted = device.type if device.index is None else f"{device.type}:{device.index}"
    if not any(d == wanted or d.split(":")[0] == wanted or (d, wanted) == ("mps", "mps:0") for d in available):
        raise AttnlabError(f"device {name!r} is not available: this torch ({torch.__version__}) on this machine has "
                           f"{', '.join(available)}")
    if device.type == "cuda" and device.index is None:  # torch.cuda.set_device needs the index
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return device
