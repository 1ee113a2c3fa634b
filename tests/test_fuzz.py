"""Fuzzing the untrusted inputs (issues 13 and 19): random mutations of every config key, of the JSON files and the
safetensors headers of a run directory, and of API requests; every numeric config key and every numeric
command-line option at extreme integers and floats (2**63, -2**63, 10**30, 1e308, inf, nan, -0.0, the limit and one
past it) and as bytes that are not UTF-8. The property: success or a one-line error with exit code 2 (an
AttnlabError), a JSON 4xx (or 200) for the API; never a traceback, never a 5xx. Seeded (derandomize), so a failure
reproduces.

The counts of examples are the `max_examples` below. `scripts/fuzz_counts.py` runs every target with more
examples ($ATTNLAB_FUZZ_EXAMPLES) and counts instead of failing ($ATTNLAB_FUZZ_COUNTS: a file that gets one JSON
line per target, {target, examples, tracebacks, internal_errors}); `docs/results.md` reports them.
"""

import contextlib
import dataclasses
import json
import math
import os
import shutil
import string
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.app.cli import build_parser, main, parse_args
from attnlab.core.config import limits, read_config_file
from attnlab.core.errors import AttnlabError
from attnlab.families.table import FAMILIES, family_of_config, load_family_config
from attnlab.runs.workflow import check_model_size

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
EXAMPLES = int(os.environ.get("ATTNLAB_FUZZ_EXAMPLES") or 0)  # 0: each target's own count below
COUNTS = os.environ.get("ATTNLAB_FUZZ_COUNTS")  # set: count the examples that break the property, do not fail
TALLY: dict[str, dict] = {}


def fuzz(n: int) -> settings:
    return settings(max_examples=EXAMPLES or n, derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck), database=None)


@contextlib.contextmanager
def example(target: str):
    """One example of a fuzz target: counted; an exception escaping it (a traceback, or the property's assertion)
    fails the test, or, when counting, is tallied as a traceback."""
    tally = TALLY.setdefault(target, {"target": target, "examples": 0, "tracebacks": 0, "internal_errors": 0})
    tally["examples"] += 1
    try:
        yield tally
    except Exception:
        if COUNTS is None:
            raise
        tally["tracebacks"] += 1


@pytest.fixture(scope="module", autouse=True)
def _write_counts():
    yield
    if COUNTS:
        with open(COUNTS, "a", encoding="utf-8") as f:
            for tally in TALLY.values():
                f.write(json.dumps(tally) + "\n")


def one_line(error: AttnlabError) -> None:
    assert "\n" not in str(error), str(error)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=3)), max_leaves=6)
EXTREME_NUMBERS = (2**63, -2**63, 2**63 - 1, 2**64, 10**30, -10**30, 2**31, 2**32, -1, 0, 1, 1e308, -1e308,
                   math.inf, -math.inf, math.nan, -0.0, 5e-324, 1e-300, 0.5, -0.5)
EXTREME_TEXTS = ("0", "-1", "1", str(2**63), str(-2**63), str(2**64), str(10**30), "1e308", "-1e308", "1e400", "inf",
                 "-inf", "nan", "-0.0", "5e-324", "0x10", " 7 ", "", "1_000", "\u0663", "9" * 5000,
                 "\udcff\udcfe")  # the last: bytes that are not UTF-8, as Python hands them over in argv


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
    with example("config mutations"):
        data = read_config_file(CONFIGS / name)
        paths = list(_paths(data))
        _mutate(data, paths[pick % len(paths)], value, delete)
        if extra:
            data[extra] = value
        try:
            family_of_config(data).from_dict(data)
        except AttnlabError as e:
            one_line(e)


# ---------------------------------------------------------------------------------------------- numeric config keys
def numeric_keys(cls: type, prefix: tuple = ()):
    """(key path, type, range) of every int and float field of a config dataclass, nested sections included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from numeric_keys(tp, prefix + (f.name,))
        elif tp in (int, float):
            yield prefix + (f.name,), tp, limits(cls, f.name, tp)


def _base_configs() -> dict[str, Path]:
    """One shipped config file of each family (the first in name order)."""
    bases: dict[str, Path] = {}
    for path in sorted(CONFIGS.rglob("*.toml")):
        bases.setdefault(family_of_config(read_config_file(path)).name, path)
    assert set(bases) == {f.name for f in FAMILIES}, bases
    return bases


BASES = _base_configs()
NUMERIC_KEYS = [(family.name, ".".join(path), tp, bounds) for family in FAMILIES
                for path, tp, bounds in numeric_keys(family.config_class)]


def _set(data: dict, key: str, value) -> None:
    *parents, leaf = key.split(".")
    for k in parents:
        data = data.setdefault(k, {})
    data[leaf] = value


def _get(cfg, key: str):
    for k in key.split("."):
        cfg = getattr(cfg, k)
    return cfg


def _check_loaded(family, cfg, key: str, bounds) -> None:
    """A config that loaded: the key's value keeps to its range, and the model's sizes are counted (on the meta
    device) or refused with one line, never a traceback."""
    value = _get(cfg, key)
    assert bounds[0] <= value <= bounds[1], (key, value, bounds)
    try:
        check_model_size(family, cfg, None)
    except AttnlabError as e:
        one_line(e)


def test_every_numeric_key_is_fuzzed():
    """The keys come from the config dataclasses, so a new numeric key is fuzzed (and must declare its range)."""
    keys = {key for _, key, _, _ in NUMERIC_KEYS}
    assert {"model.rnn.hidden_dim", "decode.beam_size", "train.seed", "model.lm.max_len", "series.length",
            "model.decomposable.n_classes", "model.minilm.max_len", "generate.temperature"} <= keys
    assert len(keys) > 80


@fuzz(300)
@given(data=st.data())
def test_numeric_config_keys_at_extremes(data):
    """Every numeric key of every family's config, set to an extreme integer or float (or its limit, or one past
    it), in the parsed config or through `--set` as text: it loads within its range and the model's size is
    checked, or one line says what is wrong."""
    family_name, key, tp, (lo, hi) = data.draw(st.sampled_from(NUMERIC_KEYS))
    value = data.draw(st.one_of(st.sampled_from(EXTREME_NUMBERS + (lo, hi, lo - 1, hi + 1)), st.integers(),
                                st.floats()))
    through_set = data.draw(st.booleans())
    with example("numeric config keys"):
        try:
            if through_set:  # as the command line hands it over: YAML text
                text = repr(value) if isinstance(value, float) else str(value)
                family, cfg = load_family_config(BASES[family_name], [f"{key}={text}"])
            else:
                raw = read_config_file(BASES[family_name])
                _set(raw, key, value)
                family = family_of_config(raw)
                cfg = family.from_dict(raw)
        except AttnlabError as e:
            one_line(e)
            return
        _check_loaded(family, cfg, key, (lo, hi))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_files")


@fuzz(200)
@given(pick=st.sampled_from(NUMERIC_KEYS), suffix=st.sampled_from([".json", ".yaml"]),
       raw=st.one_of(st.binary(min_size=1, max_size=12),
                     st.sampled_from([t.encode("utf-8", "surrogateescape") for t in EXTREME_TEXTS])))
def test_numeric_config_keys_as_raw_bytes_in_a_config_file(scratch, pick, suffix, raw):
    """A config file whose numeric key holds raw bytes: not UTF-8, number literals past every limit (1e400,
    2**64), or whatever else."""
    family_name, key, tp, bounds = pick
    data = read_config_file(BASES[family_name])
    _set(data, key, "@@FUZZ@@")
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    quoted = b'"@@FUZZ@@"' if suffix == ".json" else b"'@@FUZZ@@'"
    assert text.encode().count(quoted) == 1
    path = scratch / f"config{suffix}"
    path.write_bytes(text.encode().replace(quoted, raw))  # the bytes stand where the number stood
    with example("numeric config keys as bytes"):
        try:
            family, cfg = load_family_config(path, [])
        except AttnlabError as e:
            one_line(e)
            return
        if isinstance(_get(cfg, key), (int, float)) and not isinstance(_get(cfg, key), bool):
            _check_loaded(family, cfg, key, bounds)


# ---------------------------------------------------------------------------------------------- command-line options
PARSER = build_parser()
# the arguments a command needs before its options parse (placeholders: only parsing is fuzzed here)
REQUIRED = {("data", "bible"): [], ("data", "tsv"): ["x.tsv"], ("data", "files"): ["x.en", "x.es"],
            ("data", "paraphrase"): [], ("paraphrase", "evaluate"): ["RUN"],
            ("paraphrase", "plot"): ["RUN", "--a", "x", "--b", "y"], ("translate",): ["RUN"], ("evaluate",): ["RUN"],
            ("generate",): ["RUN"], ("plot", "attention"): ["RUN", "--sentence", "x"],
            ("plot", "explore"): ["RUN", "--sentence", "x"], ("summary",): ["CFG"], ("report",): ["RUN"],
            ("serve",): ["RUN"], ("series",): ["fib"], ("demo",): [], ("train",): [], ("paraphrase", "train"): [],
            ("average",): ["RUN"]}


def numeric_options(parser, words: tuple = ()):
    """(command words, option, range) of every option of the command line whose value is a number."""
    for action in parser._actions:
        if isinstance(action, type(PARSER._subparsers._group_actions[0])):  # argparse's sub-command action
            for name, sub in action.choices.items():
                yield from numeric_options(sub, words + (name,))
        elif action.type in (int, float):
            raise AssertionError(f"attnlab {' '.join(words)} {action.option_strings}: a number without limits")
        elif hasattr(action.type, "limits"):
            yield words, action.option_strings[-1], action.type.limits


NUMERIC_OPTIONS = list(numeric_options(PARSER))


def _option_values(data, lo, hi) -> str:
    return data.draw(st.one_of(st.sampled_from(EXTREME_TEXTS + tuple(str(v) for v in (lo, hi, lo - 1, hi + 1))),
                               st.integers().map(str), st.floats().map(repr), st.text(max_size=8),
                               st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape"))))


def test_every_numeric_option_is_fuzzed():
    options = {(" ".join(words), option) for words, option, _ in NUMERIC_OPTIONS}
    assert {("translate", "--beam"), ("generate", "--num"), ("serve", "--port"), ("series", "--seeds")} <= options
    assert len(options) > 25


@fuzz(400)
@given(data=st.data())
def test_numeric_options_at_extremes_parse_or_are_one_line(data, capsys):
    """Every numeric option of every command with an extreme or malformed value (non-UTF-8 bytes included, as
    Python passes them in argv): parsed within its limits, or argparse's error (exit code 2, one error line)."""
    words, option, (lo, hi) = data.draw(st.sampled_from(NUMERIC_OPTIONS))
    text = _option_values(data, lo, hi)
    with example("command-line options (parsing)"):
        try:
            args = parse_args(PARSER, [*words, *REQUIRED[words], option, text])
        except SystemExit as e:
            err = capsys.readouterr().err
            assert e.code == 2 and "Traceback" not in err, err
            assert len([line for line in err.splitlines() if "error:" in line]) == 1, err
            return
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        assert lo <= value <= hi, (option, text, value)


@pytest.fixture(scope="module")
def fuzz_runs(tiny_runs, tiny_lm_run, tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_cli")
    (d / "in.txt").write_text("the cat\n")
    return {**tiny_runs, "lm": tiny_lm_run, "dir": d}


RUN_OPTIONS = [(words, option, bounds) for words, option, bounds in NUMERIC_OPTIONS
               if words in (("translate",), ("generate",), ("summary",), ("evaluate",))
               and option != "--max-sentences"]


@fuzz(40)
@given(data=st.data())
def test_commands_run_with_extreme_options(data, fuzz_runs, capsys):
    """The commands themselves with those values (translate, evaluate, generate, summary of the tiny runs): a
    value within the limits runs or is one line (a beam smaller than --n-best, positions past the model's
    max_len), never a traceback."""
    words, option, (lo, hi) = data.draw(st.sampled_from(RUN_OPTIONS))
    mode = data.draw(st.sampled_from(["a limit", "in range", "in range", "anything"]))
    if mode == "a limit":
        text = data.draw(st.sampled_from([str(lo), str(hi)]))
    elif mode == "in range":
        text = data.draw(st.integers(lo, hi).map(str) if isinstance(lo, int) and isinstance(hi, int) else
                         st.floats(lo, hi).map(repr))
    else:
        text = _option_values(data, lo, hi)
    run = fuzz_runs[data.draw(st.sampled_from(["rnn", "transformer"]))]
    d = fuzz_runs["dir"]
    base = {("translate",): ["translate", str(run), str(d / "in.txt"), "-o", str(d / "out.txt")],
            ("evaluate",): ["evaluate", str(run), "--split", "dev", "--max-sentences", "2"],
            ("generate",): ["generate", str(fuzz_runs["lm"]), "--max-len", "2"],
            ("summary",): ["summary", str(run)]}[words]
    with example("command-line options (commands run)") as tally:
        try:
            code = main([*base, option, text])
        except SystemExit as e:  # argparse: checked by the parsing target
            assert e.code == 2
            capsys.readouterr()
            return
        check_exit(code, capsys.readouterr().err, tally)


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
    with example("run directory JSON") as tally:
        _mutate_run_json(fuzz_run, target, pick, value, delete, command, capsys, tally)


def _mutate_run_json(fuzz_run, target, pick, value, delete, command, capsys, tally):
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
    _run_command(run, command, capsys, tally)


@fuzz(60)
@given(which=st.sampled_from([".safetensors", ".train.safetensors"]), offset=st.integers(0, 400),
       data=st.binary(min_size=1, max_size=16), command=st.sampled_from(["translate", "resume"]))
def test_safetensors_header_mutations_are_one_line_errors(fuzz_run, which, offset, data, command, capsys):
    """Bytes overwritten inside the 8-byte length or the JSON header of a weights or optimizer file."""
    with example("safetensors headers") as tally:
        _mutate_header(fuzz_run, which, offset, data, command, capsys, tally)


def _mutate_header(fuzz_run, which, offset, data, command, capsys, tally):
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
    _run_command(run, command, capsys, tally, checkpoint="last")


@fuzz(30)
@given(target=st.sampled_from(["tokenizer/tokenizer.json", "tokenizer/src.chars.json", "tokenizer/tgt.chars.json",
                               "tokenizer", "metrics.jsonl"]),
       damage=st.one_of(st.sampled_from(["delete", "folder", "file", "empty"]), st.binary(max_size=40),
                        st.integers(0, 400)),
       command=st.sampled_from(["translate", "summary", "resume", "curves"]))
def test_damaged_tokenizer_and_metrics_files_are_one_line_errors(fuzz_run, target, damage, command, capsys):
    """A tokenizer file (or the whole folder) or metrics.jsonl deleted, replaced by a folder or a file, emptied,
    overwritten by random bytes or cut at a random byte."""
    with example("damaged tokenizer and metrics files") as tally:
        src, scratch = fuzz_run
        run = scratch / "run"
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(src, run)
        path = run / target
        if damage in ("delete", "folder", "file"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            if damage == "folder":
                path.mkdir()
            elif damage == "file":
                path.write_text("x")
        elif path.is_dir():  # the tokenizer folder: damage its source vocabulary
            path = path / "src.chars.json"
        if damage == "empty":
            path.write_bytes(b"")
        elif isinstance(damage, bytes):
            path.write_bytes(damage)
        elif isinstance(damage, int):
            path.write_bytes(path.read_bytes()[:damage])
        _run_command(run, command, capsys, tally)


def _run_command(run: Path, command: str, capsys, tally: dict, checkpoint: str = "best") -> None:
    (run / "in.txt").write_text("the cat\n")
    argv = {"translate": ["translate", str(run), str(run / "in.txt"), "--beam", "1", "--device", "cpu",
                          "--checkpoint", checkpoint, "-o", str(run / "out.txt")],
            "summary": ["summary", str(run)],
            "resume": ["train", "--resume", str(run), "--set", "train.max_steps=21", "--set", "train.device=cpu"],
            "curves": ["plot", "curves", str(run), "--out", str(run / "curves.svg")],
            }[command]
    code = main(argv)  # anything but an AttnlabError propagates: a traceback fails the test
    check_exit(code, capsys.readouterr().err, tally)


def check_exit(code: int, err: str, tally: dict) -> None:
    """The property of a finished command: exit 0, or exit 2 with exactly one error line; exit 1 (the last-resort
    handler's internal error, only when $ATTNLAB_RAISE_INTERNAL is off) is counted as an internal error."""
    if code == 1 and COUNTS is not None:
        tally["internal_errors"] += 1
        return
    assert code in (0, 2), (code, err)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("attnlab: error:")]
        assert len(errors) == 1 and "Traceback" not in err, err


# ---------------------------------------------------------------------------------------------- API
@pytest.fixture(scope="module")
def api(tiny_runs):
    from fastapi.testclient import TestClient

    from attnlab.app.server import create_app, load_models

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
    with example("API requests") as tally:
        _post(api, body, raw, surrogate, tally)


def _post(api, body, raw, surrogate, tally):
    if raw is not None:
        content = raw
    else:
        content = json.dumps(body).encode()
        if surrogate and isinstance(body, dict) and isinstance(body.get("sentence"), str):
            content = content.replace(b'"sentence": "', b'"sentence": "\\udc80', 1)
    r = api.post("/api/translate", content=content, headers={"Content-Type": "application/json"})
    if r.status_code >= 500 and COUNTS is not None:  # the API's internal error
        tally["internal_errors"] += 1
        return
    assert r.status_code < 500, (content, r.status_code, r.text)
    payload = r.json()
    assert ("translation" in payload) if r.status_code == 200 else payload.get("error")
