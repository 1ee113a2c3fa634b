"""Host memory: freed tensors stay in the process for the next step instead of going back to the kernel.

A CPU training step allocates and frees the same large tensors every step (activations, their gradients, the
logits). glibc's malloc serves an allocation above its mmap threshold (128 KiB, raised on the fly up to 32 MiB)
with fresh pages from the kernel and gives them back when the tensor is freed, and it trims the top of its heap
when more than twice that threshold is free there. The next step's tensors then take a page fault on every 4 KiB
page as they are first written, tens of thousands of faults per update of the small Transformer. With
`keep_freed_memory`, allocations up to 1 GiB come from the heap, freed memory is reused and the heap is trimmed
only when 2 GiB at its top are free: a few hundred faults per update. The price: the process keeps the memory of
its largest step until it exits. Figures: `benchmarks/malloc_bench.py`, docs/results.md (history in
docs/history/).

`Trainer` calls it when it trains on the CPU, and `Translator` when it decodes on the CPU (beam search copies its
caches into new buffers of the same size every step). Only glibc (Linux) is changed; elsewhere it does nothing.
Set ``ATTNLAB_KEEP_FREED_MEMORY=0`` (or turn every kernel off, `attnlab.kernels.switch`) to keep glibc's own
behaviour, the twin. The setting is per process and cannot be undone: a call with the kernels off changes nothing
(a later call with them on still may), and turning them off after a call leaves malloc as that call set it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

from attnlab.kernels.switch import enabled

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # bytes: larger allocations still get their own pages (and give them back)
TRIM_THRESHOLD = (1 << 31) - 1  # bytes free at the top of the heap before it is given back (mallopt takes an int)
ENV = "ATTNLAB_KEEP_FREED_MEMORY"

_done: bool | None = None  # the outcome of the first call: the setting is per process


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse (see the module docstring), once per process. Returns
    whether the setting is in effect: False where the C library is not glibc or `ATTNLAB_KEEP_FREED_MEMORY=0`, and
    False, without deciding for the process, while the kernels are off and no earlier call set it."""
    global _done
    if _done is not None:
        return _done
    if not enabled():
        log.debug("kernels off: glibc's malloc keeps its own thresholds")
        return False
    _done = False
    if os.environ.get(ENV, "1").strip() in ("0", "false", "no", "off"):
        log.debug("%s=0: glibc's malloc keeps its own thresholds", ENV)
    elif platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return _done
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        log.debug("glibc malloc keeps freed memory: %s", _done)
    return _done


def release_freed_memory() -> bool:
    """Give the memory that malloc holds free anywhere in its heaps back to the kernel (glibc's malloc_trim(0)),
    for a long-running process after it dropped much at once: the server when it drops explorations, whose Python
    objects are spread over the heap between the ones kept, so that its resident memory follows what it keeps
    (issue 47). The next allocations of that memory fault their pages in again. Returns whether memory was given
    back; False where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(trim(0))
