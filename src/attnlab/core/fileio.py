"""File I/O shared by every module: atomic writes, JSON, and reading a user's text file line by line.

Every file attnlab writes goes through `atomic_write`: the bytes go to a temporary file in the same directory,
which is then renamed over the target, so a reader (or a resumed run after a kill) never sees half a file.

A run or export folder is untrusted input (it may come from someone else), so nothing written into one may follow
a symlink: the temporary file is created with O_EXCL | O_NOFOLLOW, a rename replaces a link at the target rather
than writing through it, and the writers of such a folder pass it as `root`, below which a folder that is a
symlink (or a file where a folder belongs) is refused with an AttnlabError naming it (`real_dir`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any, Callable

from attnlab.core.errors import AttnlabError

log = logging.getLogger("attnlab")

# a new file: created here or not at all, never through a link, not inherited by child processes
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def cache_dir() -> Path:
    """Where attnlab caches corpora and tokenizers: $ATTNLAB_CACHE, else $XDG_CACHE_HOME/attnlab, else
    ~/.cache/attnlab."""
    if os.environ.get("ATTNLAB_CACHE"):
        return Path(os.environ["ATTNLAB_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "attnlab"


def real_dir(path: Path | str, root: Path | str) -> Path:
    """Creates the folder `path` inside the folder `root` (a run or an export folder) with the folders between,
    refusing any of them, `path` included and `root` excluded, that is a symlink or not a folder: a write into a
    linked folder would land in the link's target. Returns `path`."""
    path, root = Path(path), Path(root)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise AttnlabError(f"{path}: not inside {root}") from None
    make_dirs(root)
    folder = root
    for part in parts:
        folder = folder / part
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass
        except OSError as e:
            raise AttnlabError(f"{folder}: cannot create this folder ({e.strerror or e})") from None
        mode = os.lstat(folder).st_mode
        if stat.S_ISLNK(mode):
            raise AttnlabError(f"{folder}: is a symlink; attnlab never writes through a link inside a run or export "
                               "folder (remove the link)")
        if not stat.S_ISDIR(mode):
            raise AttnlabError(f"{folder}: expected a folder, found a file")
    return path


def check_replaceable_folder(out: Path, belongs: Callable[[str], bool], what: str, mark: str | None = None) -> None:
    """Refuses, naming it, a folder that an export deletes and writes anew: the current folder (`--out ''`), a
    symlink, a file, or a folder holding an entry whose name `belongs` does not accept (`what` says what such an
    entry is not, e.g. "part of a CTranslate2 export"); with `mark` (the file attnlab writes into every export of
    the kind), a folder that holds files but not `mark`: another tool's model folder has the same file names. A
    missing or empty folder passes."""
    if str(out) in ("", ".") or out.resolve() == Path.cwd().resolve():
        raise AttnlabError(f"--out {str(out)!r} names the current folder; an export needs a folder of its own")
    if not os.path.lexists(out):
        return
    mode = os.lstat(out).st_mode
    if stat.S_ISLNK(mode):
        raise AttnlabError(f"{out}: is a symlink; attnlab never writes through a link (remove it, or choose "
                           "another --out)")
    if not stat.S_ISDIR(mode):
        raise AttnlabError(f"{out}: is a file; choose another --out")
    names = sorted(p.name for p in out.iterdir())
    foreign = [name for name in names if not belongs(name)]
    if foreign:
        raise AttnlabError(f"{out}: holds {foreign[0]!r}, which is not {what}; choose a new or empty folder")
    if mark is not None and names and mark not in names:
        raise AttnlabError(f"{out}: holds a model attnlab did not export (no {mark}); attnlab replaces only its own "
                           "export: choose a new or empty folder")


def new_file(folder: Path | str, name: str) -> tuple[int, Path]:
    """(open file descriptor, path) of a new empty file `.<name>.<random>.tmp` in `folder`, created with O_EXCL |
    O_NOFOLLOW: never an existing file, never a link's target."""
    for _ in range(100):
        tmp = Path(folder) / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, CREATE_FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise AttnlabError(f"{folder}: cannot create a temporary file there")


def file_mode() -> int:
    """The mode a new file gets here: 0o666 less the process's umask (read from /proc where it can be, so that the
    umask is never changed, even for an instant, under other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: Path | str, write: Callable[[str], None], root: Path | str | None = None) -> None:
    """Runs write(tmp_path) on a new temporary file next to `path`, flushes it to disk, renames it to `path` and
    flushes the directory, so that after a crash `path` holds either its old or its new content, complete.

    `write` gets a path (not an open file) so that writers that open files themselves (safetensors) fit too; the
    file then gets the mode of any new file here (`file_mode`: safetensors writes 0600, whatever the umask). A
    failed write removes its temporary file; an interrupted process (a kill, Ctrl-C) may leave one behind, named
    `.<name>.*.tmp`: `attnlab.core.checkpoint.recover` removes those of a run before it resumes. A symlink at `path` is
    replaced by the file, never followed. `root`: the run or export folder `path` belongs to; a folder between it
    and `path` that is a symlink is refused (`real_dir`).
    """
    path = Path(path)
    if root is not None:
        real_dir(path.parent, root)
    try:
        if root is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = new_file(path.parent, path.name)
    except OSError as e:
        raise AttnlabError(f"{path}: cannot write there ({e.strerror or e})") from None
    os.close(fd)
    try:
        write(str(tmp))
        os.chmod(tmp, file_mode())  # the file this call created (or the writer put in its place)
        sync_path(tmp)
    except BaseException:  # Ctrl-C included: no temporary file left behind
        tmp.unlink(missing_ok=True)
        raise
    replace(tmp, path)


def replace(tmp: Path | str, path: Path | str) -> None:
    """Renames the complete file or folder `tmp` to `path` (a symlink at `path` is replaced, never followed) and
    flushes the directory; a failure removes nothing but names `path`."""
    try:
        os.replace(tmp, path)
    except OSError as e:  # e.g. a directory of that name
        if Path(tmp).is_file():
            Path(tmp).unlink(missing_ok=True)
        raise AttnlabError(f"{path}: cannot write there ({e.strerror or e})") from None
    sync_dir(Path(path).parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def remove_stale_staging(parent: Path | str, name: str) -> list[Path]:
    """Removes the staging folders of `name` in `parent` that a killed process left (`new_folder`'s
    `.<name>.p<pid>.<random>.tmp` whose process is gone): only attnlab's own names, only real folders, their links
    removed, never followed. Returns what was removed."""
    pattern = re.compile(rf"\.{re.escape(name)}\.p(\d+)\.[0-9a-f]{{8}}\.tmp")
    removed = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))) \
                and stat.S_ISDIR(os.lstat(entry).st_mode):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    if removed:
        log.info("removed %d staging folder(s) a killed export left in %s", len(removed), parent)
    return removed


def new_folder(parent: Path | str, name: str) -> Path:
    """A new empty folder `.<name>.p<pid>.<random>.tmp` in `parent` (created by this call, so nothing in it is a
    link someone else placed), to fill and then move into place with `replace_folder`. The staging folders of
    `name` that killed processes left there are removed first (`remove_stale_staging`)."""
    remove_stale_staging(parent, name)
    for _ in range(100):
        folder = Path(parent) / f".{name}.p{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            os.mkdir(folder)
            return folder
        except FileExistsError:
            continue
        except OSError as e:
            raise AttnlabError(f"{parent}: cannot create a folder there ({e.strerror or e})") from None
    raise AttnlabError(f"{parent}: cannot create a temporary folder there")


def replace_folder(new: Path | str, path: Path | str) -> None:
    """Moves the complete folder `new` (from `new_folder`, same parent) to `path`, after flushing its files to
    disk. An existing folder at `path` is first renamed aside and then deleted (the links in it removed, never
    followed), so `path` holds the old folder or the new one, never a mix of both; a symlink or a file at `path`
    is refused with an AttnlabError naming it."""
    new, path = Path(new), Path(path)
    for f in sorted(new.rglob("*")):
        if f.is_file() and not f.is_symlink():
            sync_path(f)
    old = None
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            raise AttnlabError(f"{path}: is a {'symlink' if stat.S_ISLNK(mode) else 'file'}; attnlab never "
                               "writes through a link or over a file it did not make (remove it)")
        old = path.parent / f".{path.name}.{secrets.token_hex(4)}.old"
        os.rename(path, old)
    try:
        os.rename(new, path)
    except OSError as e:
        if old is not None:
            os.rename(old, path)
        raise AttnlabError(f"{path}: cannot write there ({e.strerror or e})") from None
    sync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


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


def sync_path(path: Path | str) -> None:
    """Flushes a file's data to the disk; a symlink is refused, never followed (the files attnlab writes into a
    run, export or store folder)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path | str) -> None:
    """Flushes a folder's entries (a rename just made in it) to the disk, after the write itself is complete. The
    folder is the one the user named or its parent (the cache, `--out`), which may be a link and is followed like any
    tool follows it (docs/architecture.md, "Links"); a folder that cannot be flushed (a filesystem without directory
    fsync, a link gone meanwhile) is logged, never an error: the write it follows has already succeeded."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        log.debug("%s: not flushed (%s)", path, e.strerror or e)
        return
    try:
        os.fsync(fd)
    except OSError as e:
        log.debug("%s: not flushed (%s)", path, e.strerror or e)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes, root: Path | str | None = None) -> None:
    """`data` written atomically to `path` (`atomic_write`; `root` as there)."""
    def write(tmp: str) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    atomic_write(path, write, root)


def atomic_write_text(path: Path | str, text: str, root: Path | str | None = None) -> None:
    """UTF-8 text, line ends written as given (`atomic_write`; `root` as there)."""
    atomic_write_bytes(path, text.encode("utf-8"), root)


def append_line(path: Path | str, line: str) -> None:
    """Appends one line to a log file (created if absent); a symlink at `path` is refused, never followed."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise AttnlabError(f"{path}: cannot append to it ({e.strerror or e}; a symlink is refused)") from None
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def write_json(path: Path | str, obj: Any, root: Path | str | None = None) -> None:
    """`obj` as indented JSON with sorted keys, written atomically (`atomic_write`; `root` as there)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", root)


def file_sha256(path: Path | str) -> str:
    """The SHA-256 of a file's bytes, in hex (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def open_lock_file(path: Path, what: str):
    """`path` opened for writing, made if missing, to hold an flock on (`what`: whose lock, for the error); never
    through a symlink, since opening one for writing would create or touch its target. Returns the open file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except OSError as e:
        raise AttnlabError(f"{path}: cannot open {what} lock file ({e.strerror or e}; a symlink there is refused: "
                           "remove it)") from None
    return os.fdopen(fd, "w")


def read_json(path: Path | str) -> Any:
    """The parsed JSON of a file; a missing or malformed file is an AttnlabError naming it."""
    path = Path(path)
    if not path.is_file():
        raise AttnlabError(f"{path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # JSON syntax, UTF-8, an integer of more than 4,300 digits
        raise AttnlabError(f"{path}: not valid JSON ({str(e).splitlines()[0][:200]})") from None
    except RecursionError:  # arrays or objects nested thousands deep: no file attnlab reads is
        raise AttnlabError(f"{path}: not valid JSON here (nested too deeply)") from None


def read_lines(path: Path | str) -> list[str]:
    """Lines of a UTF-8 text file, without line ends (a leading BOM and CR of CRLF removed); errors name the file
    and the line."""
    path = Path(path)
    if path.is_dir():
        raise AttnlabError(f"{path}: is a directory, not a text file")
    if not path.is_file() and not path.is_fifo():  # a pipe: `attnlab translate RUN <(command)`
        raise AttnlabError(f"{path}: no such file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AttnlabError(f"{path}: cannot be read ({e.strerror or e})") from None
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
