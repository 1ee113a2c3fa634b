"""The checks at the entry of the Python API's public functions (`attnlab.app.api`): a wrong type or a value past
the command line's limit is one `AttnlabError` naming the argument, never a TypeError from deep inside or an
allocation of the size asked for. Each returns the value, converted where the type allows (a path as `Path`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from attnlab.core.config import check_range
from attnlab.core.errors import AttnlabError


def as_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AttnlabError(f"{name} must be an integer in [{lo}, {hi}], not {type(value).__name__} {value!r:.40}")
    check_range(name, value, lo, hi)
    return value


def as_optional_int(name: str, value: Any, lo: int, hi: int) -> int | None:
    return None if value is None else as_int(name, value, lo, hi)


def as_optional_number(name: str, value: Any, lo: float, hi: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise AttnlabError(f"{name} must be a number in [{lo}, {hi}], not {type(value).__name__} {value!r:.40}")
    check_range(name, value, lo, hi)
    return float(value)


def as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise AttnlabError(f"{name} must be True or False, not {type(value).__name__} {value!r:.40}")
    return value


def as_text(name: str, value: Any) -> str:
    """A str that is text: bytes are refused (decode them first), and so is a lone surrogate (not UTF-8)."""
    if not isinstance(value, str):
        hint = ": decode it first, e.g. data.decode('utf-8')" if isinstance(value, (bytes, bytearray)) else ""
        raise AttnlabError(f"{name} must be a str, not {type(value).__name__}{hint}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise AttnlabError(f"{name} holds a lone surrogate (U+{ord(value[e.start]):04X} at character {e.start}), "
                           "which is not text (a str decoded with errors='surrogateescape'?)") from None
    return value


def as_optional_text(name: str, value: Any) -> str | None:
    return None if value is None else as_text(name, value)


def as_texts(name: str, values: Any) -> list[str]:
    """A list of str from a list, tuple or other sequence of str (not one str or bytes)."""
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Sequence):
        hint = ": decode it first, e.g. data.decode('utf-8')" if isinstance(values, (bytes, bytearray)) else ""
        raise AttnlabError(f"{name} must be a str or a list of str, not {type(values).__name__}{hint}")
    return [as_text(f"{name}[{i}]", v) for i, v in enumerate(values)]


def as_path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise AttnlabError(f"{name} must be a path (a str or pathlib.Path), not {type(value).__name__}")
    return Path(os.fsdecode(value))


def as_optional_path(name: str, value: Any) -> Path | None:
    return None if value is None else as_path(name, value)
