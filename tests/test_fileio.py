"""attnlab.core.fileio: atomic writes never follow a symlink (a linked file is replaced, a linked folder below the run
or export folder `root` refused), and a folder is replaced as a whole."""

import os
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import (append_line, atomic_write, atomic_write_text, new_file, new_folder, real_dir,
                                 replace_folder, write_json)


@pytest.fixture
def decoys(tmp_path):
    (tmp_path / "decoys" / "folder").mkdir(parents=True)
    (tmp_path / "decoys" / "file").write_text("decoy")
    return tmp_path / "decoys"


def untouched(decoys) -> bool:
    return (decoys / "file").read_text() == "decoy" and not list((decoys / "folder").iterdir())


def test_a_linked_file_is_replaced_never_followed(tmp_path, decoys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").symlink_to(decoys / "file")
    write_json(run / "config.json", {"a": 1}, root=run)
    assert not (run / "config.json").is_symlink() and (run / "config.json").read_text() == '{\n  "a": 1\n}\n'
    (run / "log.txt").symlink_to(decoys / "file")
    with pytest.raises(AttnlabError, match="log.txt: cannot append"):
        append_line(run / "log.txt", "x")
    assert untouched(decoys) and not [p for p in run.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("linked", ["eval", "eval/deeper"])
def test_a_linked_folder_below_the_root_is_refused(tmp_path, decoys, linked):
    run = tmp_path / "run"
    (run / linked).parent.mkdir(parents=True, exist_ok=True)
    (run / linked).symlink_to(decoys / "folder", target_is_directory=True)
    with pytest.raises(AttnlabError, match=f"{run / linked}: is a symlink"):
        atomic_write_text(run / "eval" / "deeper" / "x.txt", "x", root=run)
    with pytest.raises(AttnlabError, match="is a symlink"):
        real_dir(run / "eval" / "deeper", run)
    assert untouched(decoys)
    (run / "file").write_text("")
    with pytest.raises(AttnlabError, match="expected a folder"):
        real_dir(run / "file", run)


def test_new_file_is_new(tmp_path):
    fd, path = new_file(tmp_path, "model.bin")
    os.close(fd)
    assert path.parent == tmp_path and path.name.startswith(".model.bin.") and path.stat().st_size == 0


def test_replace_folder_swaps_whole_folders_and_refuses_a_link(tmp_path, decoys):
    for content in ("old", "new"):
        staging = tmp_path / f".out.{content}.tmp"
        staging.mkdir()
        (staging / "model.bin").write_text(content)
        (staging / "tokenizer").symlink_to(decoys / "folder", target_is_directory=True)  # removed, not followed
        replace_folder(staging, tmp_path / "out")
        assert (tmp_path / "out" / "model.bin").read_text() == content and not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decoys", "out"]  # the old folder went
    (tmp_path / "link").symlink_to(decoys / "folder", target_is_directory=True)
    (tmp_path / ".x.tmp").mkdir()
    with pytest.raises(AttnlabError, match="link: is a symlink"):
        replace_folder(tmp_path / ".x.tmp", tmp_path / "link")
    assert untouched(decoys)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_users_linked_folder_is_followed_and_the_finished_write_stands(tmp_path, depth):
    """The user's own paths (the cache's corpora folder, `--out` and its parents) may be links: a write there lands
    in the link's target and flushing the linked parent folder is no error (issue 47: `sync_path` opened the parent
    with O_NOFOLLOW, and the finished corpus write failed with ELOOP)."""
    target = tmp_path / "other-disk"
    target.mkdir()
    link = tmp_path / "cache"
    link.symlink_to(target, target_is_directory=True)
    for i in range(depth - 1):  # a link to a link
        link, prev = tmp_path / f"cache{i}", link
        link.symlink_to(prev, target_is_directory=True)
    atomic_write_text(link / "corpus.tsv", "a\tb\n")
    assert (target / "corpus.tsv").read_text() == "a\tb\n"
    new = new_folder(link, "store")
    (new / "manifest.json").write_text("{}")
    replace_folder(new, link / "store")
    assert (target / "store" / "manifest.json").read_text() == "{}"
    assert sorted(p.name for p in target.iterdir()) == ["corpus.tsv", "store"]  # no temporary left


def test_staging_folders_of_killed_processes_are_removed_and_nothing_else(tmp_path, decoys):
    """new_folder removes what a killed export left (`.<name>.p<pid>.<random>.tmp`, its process gone): only that
    name, only real folders; a live process's staging folder, other names and a link are left alone."""
    import subprocess
    import sys

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    left = tmp_path / f".out.p{dead}.0badcafe.tmp"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "link").symlink_to(decoys / "folder", target_is_directory=True)  # removed, not followed
    alive = tmp_path / f".out.p{os.getppid()}.0badcafe.tmp"
    alive.mkdir()
    other = tmp_path / f".other.p{dead}.0badcafe.tmp"
    other.mkdir()
    linked = tmp_path / f".out.p{dead}.1badcafe.tmp"
    linked.symlink_to(decoys / "folder", target_is_directory=True)
    new = new_folder(tmp_path, "out")
    assert new.name.startswith(f".out.p{os.getpid()}.") and new.is_dir()
    assert not left.exists() and alive.is_dir() and other.is_dir() and linked.is_symlink()
    assert untouched(decoys)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path, umask):
    """Issue 47: every file attnlab writes gets 0o666 less the umask, like the rest of the folder (safetensors on its
    own writes 0600)."""
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "w.safetensors", lambda p: save_file({"x": torch.zeros(2)}, p))
        atomic_write(tmp_path / "t.txt", lambda p: Path(p).write_text("x"))
        reference = tmp_path / "plain.txt"
        reference.write_text("x")  # what any other tool writes here
    finally:
        os.umask(old)
    want = stat.S_IMODE(reference.stat().st_mode)
    assert want == 0o666 & ~umask
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == \
        {"w.safetensors": want, "t.txt": want, "plain.txt": want}
