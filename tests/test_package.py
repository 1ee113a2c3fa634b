"""attnlab as a user installs it: the wheel built from this checkout, installed into a fresh virtualenv, run from
an empty directory far from the repository. `attnlab configs` lists the packaged configs, a tiny `attnlab train
demo --set ...` trains the packaged demo config, and the README's "Use it from Python" lines run as written.

The fresh virtualenv gets the wheel only (`pip install --no-deps --no-index`); its dependencies (torch, numpy,
sentencepiece, ...) come from the test's own environment through a .pth file, because installing torch again
costs minutes and the network. attnlab itself must come from the wheel: the test checks where it is imported
from, and the repository (and its configs/ folder) is not on the path.
"""

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from attnlab.data.bible import sword_dir

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def _sword_ready() -> bool:
    d = sword_dir()
    return d is not None and all((d / "mods.d" / f"{m}.conf").is_file() for m in ("engKJV2006eb", "spaRV1909eb"))


def readme_python() -> str:
    """The first ```python block of the README's "Use it from Python" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)
    assert len(section) == 2, "README.md has no '## Use it from Python' section"
    found = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert found, "the README's 'Use it from Python' section has no python block"
    return found.group(1)


def _run(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(fresh venv's bin folder, an empty working directory, the environment to run in)."""
    root = tmp_path_factory.mktemp("package")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", root / "dist",
          REPO], root, env)
    wheels = list((root / "dist").glob("attnlab-*.whl"))
    assert len(wheels) == 1, wheels
    # without a pip of its own (ensurepip: 2-5 s): this environment's pip installs into it (pip --python)
    _run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], root, env)
    bin_dir = root / "venv" / "bin"
    site = Path(_run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root,
                     env).stdout.strip())
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # the dependencies, not attnlab
    _run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", "--no-index",
          wheels[0]], root, env)
    work = root / "work"
    work.mkdir()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return bin_dir, work, env


def test_the_wheel_holds_the_package_not_the_repository(installed):
    bin_dir, work, env = installed
    where = _run([bin_dir / "python", "-c", "import attnlab, attnlab.app.api; print(attnlab.__file__); "
                  "print(attnlab.app.api.config_path('demo'))"], work, env).stdout.split()
    assert all(Path(p).is_relative_to(bin_dir.parent) for p in where), where
    assert not any(Path(p).is_relative_to(REPO) for p in where)


def test_configs_listed_and_copied(installed):
    bin_dir, work, env = installed
    out = _run([bin_dir / "attnlab", "configs"], work, env).stdout
    for name in ("demo", "bible-transformer-small", "bible-rnn-bahdanau", "gpu/bible-transformer-base"):
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), out
    _run([bin_dir / "attnlab", "configs", "bible-transformer-small", "--copy"], work, env)
    assert (work / "bible-transformer-small.toml").is_file()


def test_train_demo_then_the_readme_lines(installed):
    """The packaged demo config by its bare name, shrunk to seconds, into runs/demo (where `make demo` puts its
    run); then the README's Python lines, verbatim, against it."""
    bin_dir, work, env = installed
    tiny = ["--set", "model.rnn.emb_dim=16", "--set", "model.rnn.hidden_dim=16", "--set", "train.max_steps=3",
            "--set", "train.max_minutes=0", "--set", "train.eval_every=3", "--set", "train.eval_max_sentences=4",
            "--set", "train.max_tokens=400", "--set", "tokenizer.vocab_size=800", "--set", "train.num_threads=1"]
    if _sword_ready():  # the demo's own data: the Bible, a small seeded subset of it
        tiny += ["--set", "data.max_train_pairs=300"]
    else:  # no SWORD modules here (no root to install them): the same config on a small corpus of its own
        (work / "tiny.tsv").write_text("".join(f"the {w} house\tla {w} casa\n" for w in
                                               ("old", "new", "big", "red", "small") * 60), encoding="utf-8")
        tiny += ["--set", "data.corpus=files", "--set", "data.train=[tiny.tsv]", "--set", "data.dev_size=20",
                 "--set", "data.test_size=20", "--set", "tokenizer.kind=char"]
    _run([bin_dir / "attnlab", "train", "demo", *tiny], work, env)
    assert (work / "runs" / "demo" / "checkpoints").is_dir()
    done = _run([bin_dir / "python", "-c", readme_python()], work, env)
    assert done.stdout.strip(), "the README's lines printed nothing"
