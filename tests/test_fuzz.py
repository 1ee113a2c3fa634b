"""Fuzzing the untrusted inputs (issue 13): random mutations of every config key, of the JSON files and the
safetensors headers of a run directory, and of API requests. The property: a one-line error with exit code 2 (or
success), a JSON 4xx (or 200); never a traceback, never a 5xx. Seeded (derandomize), so a failure reproduces.

The counts of examples are the `max_examples` below; `docs/results.md` reports them.
"""

import json
import shutil
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.cli import main
from attnlab.config import read_config_file
from attnlab.errors import AttnlabError
from attnlab.families import family_of_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
def fuzz(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
                    database=None)

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=3)), max_leaves=6)


def _paths(node, prefix=()):
    """Every key path of a nested dict (tables included)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))


def _mutate(data, path, value, delete):
    node = data
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


# ---------------------------------------------------------------------------------------------- configs
CONFIG_FILES = sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.rglob("*.toml"))


@fuzz(400)
@given(name=st.sampled_from(CONFIG_FILES), pick=st.integers(0, 10**6), value=JSON_VALUES, delete=st.booleans(),
       extra=st.one_of(st.none(), st.text(string.ascii_lowercase + "._", min_size=1, max_size=12)))
def test_config_mutations_load_or_name_the_key(name, pick, value, delete, extra):
    """Any key of any shipped config set to any JSON value (or deleted, or an unknown key added): the family's
    typed config loads, or an AttnlabError says what is wrong."""
    data = read_config_file(CONFIGS / name)
    paths = list(_paths(data))
    _mutate(data, paths[pick % len(paths)], value, delete)
    if extra:
        data[extra] = value
    try:
        family_of_config(data).from_dict(data)
    except AttnlabError as e:
        assert "\n" not in str(e)


# ---------------------------------------------------------------------------------------------- run directories
RUN_FILES = ("config.json", "tokenizer/tokenizer.json", "checkpoints/latest.json", "checkpoints/best.json",
             "checkpoints/STEP.json")


@pytest.fixture(scope="module")
def fuzz_run(tiny_runs, tmp_path_factory):
    return tiny_runs["rnn"], tmp_path_factory.mktemp("fuzz")


def _step_stem(run: Path) -> str:
    return json.loads((run / "checkpoints" / "latest.json").read_text())["name"]


@fuzz(60)
@given(target=st.sampled_from(RUN_FILES), pick=st.integers(0, 10**6), value=JSON_VALUES, delete=st.booleans(),
       command=st.sampled_from(["translate", "summary", "resume"]))
def test_run_directory_json_mutations_are_one_line_errors(fuzz_run, target, pick, value, delete, command, capsys):
    src, scratch = fuzz_run
    run = scratch / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(src, run)
    path = run / target.replace("STEP", _step_stem(run))
    data = json.loads(path.read_text())
    paths = list(_paths(data))
    if paths:
        _mutate(data, paths[pick % len(paths)], value, delete)
    else:
        data = value
    path.write_text(json.dumps(data))
    _run_command(run, command, capsys)


@fuzz(60)
@given(which=st.sampled_from([".safetensors", ".train.safetensors"]), offset=st.integers(0, 400),
       data=st.binary(min_size=1, max_size=16), command=st.sampled_from(["translate", "resume"]))
def test_safetensors_header_mutations_are_one_line_errors(fuzz_run, which, offset, data, command, capsys):
    """Bytes overwritten inside the 8-byte length or the JSON header of a weights or optimizer file."""
    src, scratch = fuzz_run
    run = scratch / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(src, run)
    path = run / "checkpoints" / f"{_step_stem(run)}{which}"
    raw = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(raw[:8], "little")
    at = offset % header
    raw[at:at + len(data)] = data
    path.write_bytes(bytes(raw))
    _run_command(run, command, capsys, checkpoint="last")


def _run_command(run: Path, command: str, capsys, checkpoint: str = "best") -> None:
    (run / "in.txt").write_text("the cat\n")
    argv = {"translate": ["translate", str(run), str(run / "in.txt"), "--beam", "1", "--device", "cpu",
                          "--checkpoint", checkpoint, "-o", str(run / "out.txt")],
            "summary": ["summary", str(run)],
            "resume": ["train", "--resume", str(run), "--set", "train.max_steps=21", "--set", "train.device=cpu"]
            }[command]
    code = main(argv)  # anything but an AttnlabError propagates: a traceback fails the test
    err = capsys.readouterr().err
    assert code in (0, 2)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("attnlab: error:")]
        assert len(errors) == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------------------------- API
@pytest.fixture(scope="module")
def api(tiny_runs):
    from fastapi.testclient import TestClient

    from attnlab.server import create_app, load_models

    return TestClient(create_app(load_models([tiny_runs["rnn"]], max_chars=120), max_chars=120, max_body=2048,
                                 timeout=30), raise_server_exceptions=False)


REQUEST_VALUES = st.one_of(JSON_VALUES, st.text(alphabet=st.characters(codec="utf-8", exclude_categories=()),
                                                max_size=40))


@fuzz(200)
@given(body=st.one_of(
    st.fixed_dictionaries({"model": st.sampled_from(["rnn", "ghost", ""]) | REQUEST_VALUES,
                           "sentence": st.text(max_size=60) | REQUEST_VALUES},
                          optional={"beam": st.integers(-3, 20) | REQUEST_VALUES, "extra": REQUEST_VALUES}),
    JSON_VALUES),
    raw=st.one_of(st.none(), st.binary(max_size=80)), surrogate=st.booleans())
def test_api_requests_get_json_answers_never_a_5xx(api, body, raw, surrogate):
    if raw is not None:
        content = raw
    else:
        content = json.dumps(body).encode()
        if surrogate and isinstance(body, dict) and isinstance(body.get("sentence"), str):
            content = content.replace(b'"sentence": "', b'"sentence": "\\udc80', 1)
    r = api.post("/api/translate", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (content, r.status_code, r.text)
    payload = r.json()
    assert ("translation" in payload) if r.status_code == 200 else payload.get("error")
