"""Config loading: TOML/YAML, --set overrides, and rejection of unknown keys, wrong types, bad choices."""

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from attnlab.core.config import apply_overrides, from_dict, load_config
from attnlab.core.errors import AttnlabError


@dataclass
class Inner:
    size: int = 4
    rate: float = 0.5
    kind: str = "a"
    CHOICES: ClassVar[dict] = {"kind": ("a", "b")}


@dataclass
class Outer:
    name: str = "x"
    flag: bool = False
    paths: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)


def test_from_dict_fills_nested_and_widens_int_to_float():
    cfg = from_dict(Outer, {"name": "y", "inner": {"size": 8, "rate": 1}, "paths": ["a", "b"]})
    assert cfg == Outer("y", False, ["a", "b"], Inner(8, 1.0, "a"))
    assert isinstance(cfg.inner.rate, float)


@pytest.mark.parametrize("data, message", [
    ({"inner": {"sise": 3}}, "unknown config key inner.sise; valid keys in inner: size, rate, kind"),
    ({"nmae": "q"}, "unknown config key nmae"),
    ({"inner": {"size": "big"}}, "inner.size: expected int, got str 'big'"),
    ({"inner": {"size": True}}, "inner.size: expected int, got bool"),
    ({"flag": 1}, "flag: expected bool, got int"),
    ({"inner": {"kind": "c"}}, "inner.kind: 'c' is not one of 'a', 'b'"),
    ({"paths": "a.tsv"}, "paths: expected a list"),
    ({"inner": [1, 2]}, "inner: expected a table of keys, got [1, 2]"),
    ([1, 2], "the config: expected a table of keys, got list [1, 2]"),
])
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(AttnlabError) as e:
        from_dict(Outer, data)
    assert message in str(e.value)


def test_overrides_parse_values_and_create_tables():
    data = apply_overrides({"inner": {"size": 1}}, ["inner.size=200", "inner.rate=1e-3", "flag=true",
                                                     "name=lstm", "paths=[a, b]"])
    assert data == {"inner": {"size": 200, "rate": 1e-3}, "flag": True, "name": "lstm", "paths": ["a", "b"]}
    with pytest.raises(AttnlabError, match="KEY=VALUE"):
        apply_overrides({}, ["inner.size"])


@pytest.mark.parametrize("suffix, text", [
    (".toml", 'name = "t"\n[inner]\nsize = 3\n'),
    (".yaml", "name: t\ninner:\n  size: 3\n"),
])
def test_load_toml_and_yaml(tmp_path, suffix, text):
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    cfg = load_config(Outer, path, ["inner.kind=b"])
    assert (cfg.name, cfg.inner.size, cfg.inner.kind) == ("t", 3, "b")


def test_unparseable_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(AttnlabError, match="bad.toml: cannot parse"):
        load_config(Outer, bad)
    with pytest.raises(AttnlabError, match="no such config file"):
        load_config(Outer, tmp_path / "none.toml")


@pytest.mark.parametrize("override, message", [
    ("train.lr=.nan", "train.lr: expected a finite number"),
    ("train.lr=.inf", "train.lr: expected a finite number"),
    ("train.lr=-0.1", "train.lr = -0.1 is below the minimum 0.0"),
    ("train.adam_beta2=1.0", "train: adam_beta2 must be in [0, 1)"),
    ("train.adam_beta1=-0.5", "train.adam_beta1 = -0.5 is below the minimum 0.0"),
    ("train.plateau_patience=0", "train.plateau_patience = 0 is below the minimum 1"),
    ("train.plateau_factor=0", "train: plateau_factor must be in (0, 1]"),
    ("train.weight_decay=-1", "train.weight_decay = -1.0 is below the minimum 0.0"),
    ("decode.batch_size=-1", "decode.batch_size = -1 is below the minimum 0"),
    ("decode.beam_size=-2", "decode.beam_size = -2 is below the minimum 1"),
    ("decode.max_len_ratio=0", "max_len_ratio > 0"),
    # numbers beyond what the machine can hold or allocate: refused by their key's limit before anything is built
    ("model.rnn.hidden_dim=1000000000000", "model.rnn.hidden_dim = 1000000000000 exceeds the limit 65536"),
    ("decode.beam_size=1000000000", "decode.beam_size = 1000000000 exceeds the limit 256"),
    ("decode.max_len_ratio=1e300", "decode.max_len_ratio = 1e+300 exceeds the limit 100.0"),
    ("train.seed=9223372036854775808", "train.seed = 9223372036854775808 exceeds the limit 4294967295"),
    ("train.seed=-1", "train.seed = -1 is below the minimum 0"),
    ("train.num_threads=1000000", "train.num_threads = 1000000 exceeds the limit 1024"),
    ("tokenizer.vocab_size=1000000000000", "tokenizer.vocab_size = 1000000000000 exceeds the limit 1048576"),
    ("data.dev_size=-5", "data.dev_size = -5 is below the minimum 0"),
    ("model.rnn.dropout=.nan", "model.rnn.dropout: expected a finite number"),
])
def test_experiment_values_are_checked_by_name_before_any_work(override, message):
    from attnlab.families.translation import load_experiment

    with pytest.raises(AttnlabError) as e:
        load_experiment("configs/demo.toml", [override])
    assert message in str(e.value)


def test_yaml_anchors_and_aliases_are_refused(tmp_path):
    """A YAML 'billion laughs' (nested aliases) would expand to gigabytes; configs need no aliases at all."""
    bomb = tmp_path / "bomb.yaml"
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
              f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]" for i in range(8)]
    bomb.write_text("\n".join(lines) + "\n")
    from attnlab.core.config import read_config_file

    with pytest.raises(AttnlabError, match="anchors and aliases"):
        read_config_file(bomb)
    plain = tmp_path / "plain.yaml"
    plain.write_text("train:\n  lr: 0.001\n")
    assert read_config_file(plain) == {"train": {"lr": 0.001}}


def test_accumulation_longer_than_an_epoch_is_refused(tmp_path):
    """Before the check, accum_steps above the batches of an epoch looped forever without one update."""
    import torch

    from attnlab.training.trainer import Trainer, TrainConfig

    data = torch.utils.data.TensorDataset(torch.zeros(3))
    data.lengths = lambda: [4, 4, 4]
    cfg = TrainConfig(max_tokens=4, accum_steps=5, device="cpu", progress=False)
    with pytest.raises(AttnlabError, match=r"train.accum_steps \(5\) exceeds the 3 batches of an epoch"):
        Trainer(torch.nn.Linear(1, 1), cfg, data, data, tmp_path)


# ---------------------------------------------------------------------------------------------- limits (issue 19)
@dataclass
class Sized:
    width: int = 8
    rate: float = 0.5
    count: int = 3  # no declared range: the default of its type
    LIMITS: ClassVar[dict] = {"width": (1, 64), "rate": (0.0, 1.0)}


@pytest.mark.parametrize("data, message", [
    ({"width": 10**12}, "width = 1000000000000 exceeds the limit 64"),
    ({"width": 0}, "width = 0 is below the minimum 1"),
    ({"rate": 1e308}, "rate = 1e+308 exceeds the limit 1.0"),
    ({"rate": -0.5}, "rate = -0.5 is below the minimum 0.0"),
    ({"count": 2**63}, f"count = {2**63} exceeds the limit {2**31 - 1}"),
    ({"count": -1}, "count = -1 is below the minimum 0"),
])
def test_numbers_out_of_their_range_name_the_key_and_the_limit(data, message):
    with pytest.raises(AttnlabError) as e:
        from_dict(Sized, data)
    assert str(e.value) == message
    assert from_dict(Sized, {"width": 64, "rate": 0.0, "count": 2**31 - 1}) == Sized(64, 0.0, 2**31 - 1)


def _config_classes():
    """Every config dataclass of every family, nested sections included."""
    import dataclasses
    import typing

    from attnlab.families.table import FAMILIES

    seen, todo = [], [f.config_class for f in FAMILIES]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo += [tp for tp in typing.get_type_hints(cls).values() if dataclasses.is_dataclass(tp)]
    return seen


@pytest.mark.parametrize("cls", _config_classes(), ids=lambda c: c.__name__)
def test_every_numeric_key_declares_its_range(cls):
    """A new numeric key must say which values it takes; the defaults lie inside their ranges."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    numeric = {f.name for f in dataclasses.fields(cls) if hints[f.name] in (int, float)}
    declared = getattr(cls, "LIMITS", {})
    assert numeric == set(declared), f"{cls.__name__}: undeclared {numeric - set(declared)}, unknown " \
                                     f"{set(declared) - numeric}"
    default = cls()
    for name, (lo, hi) in declared.items():
        assert lo <= getattr(default, name) <= hi, (cls.__name__, name)


@pytest.mark.parametrize("suffix, text", [
    (".toml", "[inner]\nsize = " + "9" * 5000 + "\n"),
    (".yaml", "inner:\n  size: " + "9" * 5000 + "\n"),
    (".json", '{"inner": {"size": ' + "9" * 5000 + "}}"),
])
def test_an_integer_too_long_to_read_is_a_parse_error(tmp_path, suffix, text):
    """Python refuses to convert more than 4,300 digits (a ValueError the parsers let through)."""
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    with pytest.raises(AttnlabError, match=rf"c\{suffix}: cannot parse: Exceeds the limit \(4300 digits\)"):
        load_config(Outer, path)
    with pytest.raises(AttnlabError, match="inner.size: expected int, got float inf"):
        load_config(Outer, None, ["inner.size=" + "9" * 5000])


def test_a_config_file_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"name: t\ninner:\n  size: \xe9\n")
    with pytest.raises(AttnlabError, match=r"c\.yaml:3: not valid UTF-8 \(byte 0xe9\); a config file is UTF-8 text"):
        load_config(Outer, path)
