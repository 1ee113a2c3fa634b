"""attnlab.core.devices: device names resolved against what this machine and torch build have (CUDA, MPS and XPU
simulated), and the amp dtype from the CPU's flags."""

import pytest
import torch

from attnlab.core import devices
from attnlab.core.errors import AttnlabError


@pytest.mark.parametrize("name, message", [
    ("cuda:7", "device 'cuda:7' is not available: this torch (.*) on this machine has cpu, cuda:0"),
    ("mps", "device 'mps' is not available"),
    ("xpu", "device 'xpu' is not available"),
    ("meta", "device 'meta' is not available"),
    ("gpu", "device 'gpu' is not a device name; use auto, cpu, cuda, cuda:N or mps"),
    ("cuda:-1", "device 'cuda:-1' is not a device name"),
])
def test_a_device_this_machine_or_torch_lacks_is_one_line(monkeypatch, name, message):
    """On a machine with one (simulated) CUDA device and no MPS: only cpu, cuda and cuda:0 resolve."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if getattr(torch, "xpu", None) is not None:
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    # "cuda" is this process's GPU with its index: the trainer's torch.cuda.set_device refuses a bare "cuda"
    assert [devices.resolve_device(n) for n in ("cpu", "cuda", "cuda:0")] == [torch.device("cpu"), torch.device("cuda:0"),
                                                                       torch.device("cuda:0")]
    with pytest.raises(AttnlabError, match=message):
        devices.resolve_device(name)


@pytest.mark.parametrize("amp, flags, expected", [
    ("none", {"avx512_bf16"}, None),
    ("auto", {"avx512f", "avx512_bf16"}, torch.bfloat16),
    ("auto", {"amx_bf16", "amx_tile"}, torch.bfloat16),
    ("auto", {"avx512f", "avx2"}, None),  # no native bf16: fp32
    ("auto", set(), None),  # no /proc/cpuinfo (macOS, Windows): fp32
    ("bf16", set(), torch.bfloat16),  # forced
])
def test_amp_on_the_cpu_follows_its_flags(monkeypatch, amp, flags, expected):
    monkeypatch.setattr(devices, "cpu_flags", lambda: flags)
    assert devices.amp_dtype(amp, torch.device("cpu")) == expected


def test_fp16_on_the_cpu_is_refused():
    with pytest.raises(AttnlabError, match="fp16.*CUDA"):
        devices.amp_dtype("fp16", torch.device("cpu"))
