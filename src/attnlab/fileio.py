"""File I/O shared by every module: atomic writes, JSON, and reading a user's text file line by line.

Every file attnlab writes goes through `atomic_write`: the bytes go to a temporary file in the same directory,
which is then renamed over the target, so a reader (or a resumed run after a kill) never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from attnlab.errors import AttnlabError


def atomic_write(path: Path | str, write: Callable[[str], None]) -> None:
    """Runs write(tmp_path) on a temporary file next to `path`, flushes it to disk, renames it to `path` and
    flushes the directory, so that after a crash `path` holds either its old or its new content, complete.

    `write` gets a path (not an open file) so that writers that open files themselves (safetensors) fit too. A
    failed write removes its temporary file; an interrupted process (a kill, Ctrl-C) may leave one behind, named
    `.<name>.*`: `attnlab.checkpoint.recover` removes those of a run before it resumes. A symlink at `path` is
    replaced by the file, never followed.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:
        raise AttnlabError(f"{path}: cannot write there ({e.strerror or e})") from None
    os.close(fd)
    try:
        write(tmp)
        _fsync(tmp)
    except Exception:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        os.replace(tmp, path)
    except OSError as e:  # e.g. a directory of that name
        Path(tmp).unlink(missing_ok=True)
        raise AttnlabError(f"{path}: cannot write there ({e.strerror or e})") from None
    _fsync(path.parent)


def make_dirs(path: Path | str) -> Path:
    """Creates the folder `path` and its parents (an existing folder is fine); a file standing where a folder must
    be, or a folder that cannot be created, is an AttnlabError naming the path."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise AttnlabError(f"{path}: cannot create this folder: a file stands at it or above it") from None
    except OSError as e:
        raise AttnlabError(f"{path}: cannot create this folder ({e.strerror or e})") from None
    return path


def _fsync(path: Path | str) -> None:
    """Flushes a file's (or a directory's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: Path | str, text: str) -> None:
    """UTF-8 text, line ends written as given."""
    atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: Path | str, line: str) -> None:
    """Appends one line to a log file (created if absent); a symlink at `path` is refused, never followed."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise AttnlabError(f"{path}: cannot append to it ({e.strerror or e}; a symlink is refused)") from None
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def write_json(path: Path | str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: Path | str) -> Any:
    """The parsed JSON of a file; a missing or malformed file is an AttnlabError naming it."""
    path = Path(path)
    if not path.is_file():
        raise AttnlabError(f"{path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # JSON syntax, UTF-8, an integer of more than 4,300 digits
        raise AttnlabError(f"{path}: not valid JSON ({str(e).splitlines()[0][:200]})") from None


def read_lines(path: Path | str) -> list[str]:
    """Lines of a UTF-8 text file, without line ends (a leading BOM and CR of CRLF removed); errors name the file
    and the line."""
    path = Path(path)
    if not path.is_file():
        raise AttnlabError(f"{path}: no such file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise AttnlabError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.rstrip("\r") for ln in lines]
