"""The one switch of every kernel: on by default, off for the whole process with ``ATTNLAB_KERNELS=0`` (or
``off``, ``false``, ``no``), and off or on for a block of code with `disabled()` / `override(on)`.

Every kernel site asks `enabled()` when it runs (never at import), so the environment variable reaches the
subprocesses a run starts (torchrun ranks, data workers) and a test may change it. The override is a contextvar:
it holds in the thread or asyncio task that set it and in nothing else, so a test that turns the kernels off in
one thread leaves a server's other requests as they were.

Inside a region `torch.compile` traces, every kernel steps aside for its plain twin: the compiler fuses the plain
expressions itself, while a kernel's Python (the contextvar read, `random_`, loops over blocks) would break the
graph at every site (a Transformer training step: 29 graphs instead of one; `tests/test_trainer.py`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator

import torch

from attnlab.core.errors import AttnlabError

ENV = "ATTNLAB_KERNELS"
ON = ("1", "on", "true", "yes", "")
OFF = ("0", "off", "false", "no")

_OVERRIDE: contextvars.ContextVar[bool | None] = contextvars.ContextVar("attnlab_kernels", default=None)


@functools.lru_cache(maxsize=16)
def _parse(value: str) -> bool:
    word = value.strip().lower()
    if word in ON:
        return True
    if word in OFF:
        return False
    raise AttnlabError(f"{ENV}={value!r} is neither on ({', '.join(repr(w) for w in ON[:-1])}) nor off "
                       f"({', '.join(repr(w) for w in OFF)})")


def enabled() -> bool:
    """Whether the kernels run: the innermost `override` / `disabled` block around this call decides, else
    ``ATTNLAB_KERNELS`` (unset: on). A value that is neither on nor off is a user's mistake (`AttnlabError`).
    Off while `torch.compile` traces (see the module docstring)."""
    if torch.compiler.is_compiling():
        return False
    forced = _OVERRIDE.get()
    if forced is not None:
        return forced
    return _parse(os.environ.get(ENV, "1"))


@contextlib.contextmanager
def override(on: bool) -> Iterator[None]:
    """Within this block (this thread or task only) every kernel is on, or off, whatever ``ATTNLAB_KERNELS``
    says: a test holds a kernel against its plain twin with `override(True)` and `override(False)`."""
    token = _OVERRIDE.set(bool(on))
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def disabled() -> contextlib.AbstractContextManager[None]:
    """`override(False)`: the plain torch expressions, every kernel off, within the block."""
    return override(False)
