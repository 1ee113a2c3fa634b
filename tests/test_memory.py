"""attnlab.kernels.memory: freed memory reused by the next allocation instead of faulted back in from the kernel; with
the kernels off (ATTNLAB_KERNELS=0, which each probe process is given explicitly), glibc's own thresholds."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

import attnlab.training.trainer
import attnlab.decode.translate
from attnlab import kernels
from attnlab.kernels.memory import ENV
from attnlab.training.trainer import TrainConfig, Trainer
from attnlab.decode.translate import DecodeConfig, Translator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# A fresh process frees a 64 MiB tensor and counts the minor page faults of writing a 48 MiB one (both above the
# 32 MiB that glibc's mmap threshold can rise to by itself; smaller than the first, so that it fits in the freed
# block with its alignment): 12,288 with 4 KiB pages where the memory went back to the kernel, (almost) none where
# it was kept.
PROBE = """
import json, resource, torch
from attnlab.kernels.memory import keep_freed_memory
kept = keep_freed_memory()
x = torch.empty(16 << 20); x.fill_(1.0); del x
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
y = torch.empty(12 << 20); y.fill_(2.0)
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def _probe(setting: str, kernels_setting: str = "1") -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, ENV: setting, kernels.ENV: kernels_setting},
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="keep_freed_memory changes glibc's malloc only")
def test_freed_memory_is_reused_without_page_faults():
    default, kept = _probe("0"), _probe("1")
    assert default["kept"] is False and kept["kept"] is True
    assert _probe("1", kernels_setting="0")["kept"] is False  # the kernels off: glibc's own thresholds
    # where the kernel backs fresh memory with huge pages the control faults little too; the kept process must
    # fault at most a tenth as often as the control, and under 1,000 times (48 MiB: 12,288 pages of 4 KiB)
    assert kept["faults"] < 1000, (default, kept)
    assert kept["faults"] * 10 <= max(default["faults"], 1000), (default, kept)


def test_the_trainer_keeps_freed_memory_on_the_cpu(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(attnlab.training.trainer, "keep_freed_memory", lambda: calls.append(1) or True)
    data = torch.utils.data.TensorDataset(torch.zeros(3))
    data.lengths = lambda: [4, 4, 4]
    Trainer(torch.nn.Linear(1, 1), TrainConfig(max_tokens=4, device="cpu", progress=False), data, data, tmp_path)
    assert calls == [1]


def test_the_translator_keeps_freed_memory_on_the_cpu(monkeypatch):
    """A beam's caches are reordered into new buffers every step: decoding on the CPU reuses freed memory too."""
    calls = []
    monkeypatch.setattr(attnlab.decode.translate, "keep_freed_memory", lambda: calls.append(1) or True)
    Translator(torch.nn.Linear(1, 1), None, DecodeConfig(), "cpu")
    assert calls == [1]


def test_with_the_kernels_off_nothing_is_decided_for_the_process(monkeypatch):
    """A call while the kernels are off changes nothing and says so, and leaves the decision to a later call."""
    from attnlab.kernels import memory

    monkeypatch.setattr(memory, "_done", None)
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda *a: pytest.fail("mallopt was called"))
    with kernels.disabled():
        assert memory.keep_freed_memory() is False
    assert memory._done is None
