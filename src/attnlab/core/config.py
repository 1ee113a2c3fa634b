"""Typed configuration: dataclasses filled from TOML or YAML files and `--set key.path=value` overrides.

Unknown keys, wrong types, invalid choices and numbers out of range are rejected at load time with the full key
path and the valid options or the limit. A dataclass declares its choice fields in a class variable
`CHOICES: ClassVar[dict[str, tuple]]` and the closed range [lo, hi] of its numeric fields in
`LIMITS: ClassVar[dict[str, tuple[lo, hi]]]`; a numeric field it does not list gets the range of its type
(`DEFAULT_LIMITS`). The check runs before any value is used, so a size of 10**12 is one line naming the key and
its limit, never an allocation. Cross-field rules (d_model divisible by h, open intervals such as dropout < 1)
stay in the classes' `__post_init__`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from attnlab.core.errors import AttnlabError

T = TypeVar("T")

# Upper limits shared by the config classes and the command line's options. Each is far beyond any useful setting
# and small enough that a value at the limit neither overflows a C integer (torch, SentencePiece, the OS) nor is
# refused only after gigabytes are allocated; what several keys multiply to is bounded where the model is built
# (`MAX_PARAMETERS`).
MAX_COUNT = 2**31 - 1  # steps, epochs, sentences, examples: a signed 32-bit integer
MAX_SEED = 2**32 - 1  # the largest seed numpy accepts (torch and random take it too)
MAX_DIM = 65536  # the width of one layer: emb_dim, hidden_dim, d_model, attn_dim
MAX_LAYERS = 1024  # layers of a stack
MAX_VOCAB = 2**20  # tokens of a vocabulary (SentencePiece models are far smaller)
MAX_LEN = 65536  # tokens of one sequence: positions, source limit, generated tokens, packed rows
MAX_BEAM = 256  # hypotheses per sentence; the search holds beam x batch rows of vocabulary scores each step
MAX_SAMPLES = 1024  # samples a language model draws at once (one batch): generate --num, Run.generate(num=)
MAX_THREADS = 1024  # torch CPU threads
MAX_PARAMETERS = 10**9  # a model's parameters: 4 GB of float32 weights, 16 GB with gradients and Adam's moments

DEFAULT_LIMITS: dict[type, tuple[float, float]] = {int: (0, MAX_COUNT), float: (-1e9, 1e9)}

# The configs that ship inside the package (the recipes: `attnlab configs` lists them); a bare name such as
# "demo" or "gpu/bible-transformer-base" names one of them.
PACKAGED_CONFIGS = Path(__file__).parent.parent / "configs"
CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def check_range(key: str, value: float, lo: float, hi: float) -> None:
    """An AttnlabError naming `key` and the limit when value is outside [lo, hi]."""
    if value > hi:
        raise AttnlabError(f"{key} = {value!r} exceeds the limit {hi!r}")
    if value < lo:
        raise AttnlabError(f"{key} = {value!r} is below the minimum {lo!r}")


def limits(cls: type, name: str, tp: Any) -> tuple[float, float] | None:
    """The range [lo, hi] of numeric field `name` of config class `cls` (type `tp`), or None for a field that is
    not a number."""
    declared = getattr(cls, "LIMITS", {})
    if name in declared:
        return declared[name]
    return DEFAULT_LIMITS.get(tp)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Checks (and, for int -> float, widens) one value against a field's type annotation."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except AttnlabError as e:
                errors.append(str(e))
        raise AttnlabError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise AttnlabError(f"{key}: expected a list, got {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise AttnlabError(f"{key}: expected a table of keys, got {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if tp is bool and not isinstance(value, bool) or tp is not bool and isinstance(value, bool) \
            or not isinstance(value, tp):
        raise AttnlabError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if tp is float and not math.isfinite(value):
        raise AttnlabError(f"{key}: expected a finite number, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Builds dataclass `cls` from a dict, validating every key, type, range and choice."""
    if not isinstance(data, dict):
        raise AttnlabError(f"{prefix.rstrip('.') or 'the config'}: expected a table of keys, got "
                           f"{type(data).__name__} {data!r:.60}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise AttnlabError(f"unknown config key {prefix}{unknown[0]!s}; valid keys in "
                           f"{prefix.rstrip('.') or 'the top level'}: {', '.join(fields)}")
    kwargs = {name: _coerce(value, hints[name], prefix + name) for name, value in data.items()}
    for name, value in kwargs.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            bounds = limits(cls, name, type(value))
            if bounds is not None:
                check_range(prefix + name, value, *bounds)
    choices = getattr(cls, "CHOICES", {})
    for name, value in kwargs.items():
        if name in choices and value not in choices[name]:
            raise AttnlabError(f"{prefix}{name}: {value!r} is not one of "
                               f"{', '.join(repr(c) for c in choices[name])}")
    try:
        return cls(**kwargs)
    except AttnlabError as e:
        raise AttnlabError(f"{prefix.rstrip('.')}: {e}" if prefix else str(e)) from None


def to_dict(cfg: Any) -> dict:
    """The dataclass as plain nested dicts (JSON/TOML-serialisable)."""
    return dataclasses.asdict(cfg)


def packaged_configs() -> list[str]:
    """The bare names of the packaged configs ("demo", "gpu/bible-transformer-base", ...), sorted."""
    return sorted(p.relative_to(PACKAGED_CONFIGS).with_suffix("").as_posix()
                  for p in PACKAGED_CONFIGS.rglob("*.toml"))


def resolve_config(name: Path | str) -> Path:
    """The file a config argument names: an existing file as given; else a packaged config by its bare name
    ("demo", "demo.toml", "gpu/bible-rnn-luong"), also when written as the repository's path configs/NAME.toml
    (so the README's commands work from any directory once the package is installed). Anything else is an
    AttnlabError that lists the packaged names."""
    path = Path(name)
    if path.is_file():
        return path
    rel = path.as_posix()
    rel = rel[len("configs/"):] if rel.startswith("configs/") else rel
    rel = rel[: -len(".toml")] if rel.endswith(".toml") else rel
    if rel and not path.is_absolute() and ".." not in Path(rel).parts and (PACKAGED_CONFIGS / f"{rel}.toml").is_file():
        return PACKAGED_CONFIGS / f"{rel}.toml"
    if path.exists():
        raise AttnlabError(f"{path}: not a config file (a directory?)")
    raise AttnlabError(f"{path}: no such config file, and no packaged config of that name (packaged: "
                       f"{', '.join(packaged_configs())}; `attnlab configs` lists them)")


def read_config_file(path: Path | str) -> dict:
    """The raw dict of a .toml, .yaml/.yml or .json config file, or of a packaged config named by its bare name
    (`resolve_config`)."""
    path = resolve_config(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AttnlabError(f"{path}: cannot read the config file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise AttnlabError(f"{path}:{line}: not valid UTF-8 (byte 0x{raw[e.start]:02x}); a config file is UTF-8 "
                           "text") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = _safe_yaml(text, path)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise AttnlabError(f"{path}: config files are .toml, .yaml, .yml or .json")
    except yaml.MarkedYAMLError as e:
        raise AttnlabError(f"{path}: cannot parse: {_yaml_problem(e)}") from None
    except (yaml.YAMLError, ValueError) as e:  # TOML and JSON syntax errors are ValueErrors, and so is an integer
        # of more than 4,300 digits (Python's limit for converting one from text)
        raise AttnlabError(f"{path}: cannot parse: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise AttnlabError(f"{path}: expected a table of keys at the top level")
    return data


def _yaml_problem(e: yaml.MarkedYAMLError) -> str:
    """A YAML syntax error on one line, as tomllib words its own: the problem, where it was found (1-based, "at
    line L, column C"), and where the construct it breaks began, e.g. "expected ',' or ']', but got '<stream end>'
    (at line 4, column 1; while parsing a flow sequence from line 2, column 8)"."""
    if e.problem is None or e.problem_mark is None:
        return str(e).splitlines()[0]
    where = f"at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}"
    if e.context:
        where += f"; {e.context}"
        if e.context_mark is not None:
            where += f" from line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
    return f"{e.problem} ({where})"


def _safe_yaml(text: str, path: Path) -> Any:
    """YAML without anchors and aliases: a config needs none, and nested aliases expand to gigabytes
    ("billion laughs")."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise AttnlabError(f"{path}: YAML anchors and aliases (&name, *name) are not allowed in a config")
    return yaml.safe_load(text) or {}


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Applies `a.b.c=value` overrides (value parsed as YAML: 200, 0.1, true, lstm, [1, 2])."""
    for item in overrides:
        if "=" not in item:
            raise AttnlabError(f"--set {item!r}: expected KEY=VALUE, e.g. train.max_steps=200")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except (yaml.YAMLError, ValueError):  # ValueError: an integer of more than 4,300 digits
            value = raw
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
            try:
                value = float(value)
            except ValueError:
                pass
        node = data
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise AttnlabError(f"--set {key}: {p} is not a table")
        node[leaf] = value
    return data


def load_config(cls: type[T], path: Path | str | None = None, overrides: list[str] | None = None,
                base: dict | None = None) -> T:
    """The config of type `cls` from a file (or `base` dict) plus overrides."""
    data = copy.deepcopy(base or {}) if path is None else read_config_file(path)
    return from_dict(cls, apply_overrides(data, list(overrides or [])))
