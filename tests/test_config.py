"""Config loading: TOML/YAML, --set overrides, and rejection of unknown keys, wrong types, bad choices."""

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from attnlab.config import apply_overrides, from_dict, load_config
from attnlab.errors import AttnlabError


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
    ("train.lr=-0.1", "train: lr must be a finite number >= 0"),
    ("train.adam_beta2=1.0", "train: adam_beta2 must be in [0, 1)"),
    ("train.adam_beta1=-0.5", "train: adam_beta1 must be in [0, 1)"),
    ("train.plateau_patience=0", "train: plateau_patience must be >= 1"),
    ("train.plateau_factor=0", "train: plateau_factor must be in (0, 1]"),
    ("train.weight_decay=-1", "train: weight_decay must be a finite number >= 0"),
    ("decode.batch_size=0", "decode: batch_size must be >= 1"),
    ("decode.beam_size=-2", "decode: beam_size must be >= 1"),
    ("decode.max_len_ratio=0", "max_len_ratio > 0"),
    ("model.rnn.dropout=.nan", "model.rnn.dropout: expected a finite number"),
])
def test_experiment_values_are_checked_by_name_before_any_work(override, message):
    from attnlab.experiment import load_experiment

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
    from attnlab.config import read_config_file

    with pytest.raises(AttnlabError, match="anchors and aliases"):
        read_config_file(bomb)
    plain = tmp_path / "plain.yaml"
    plain.write_text("train:\n  lr: 0.001\n")
    assert read_config_file(plain) == {"train": {"lr": 0.001}}


def test_accumulation_longer_than_an_epoch_is_refused(tmp_path):
    """Before the check, accum_steps above the batches of an epoch looped forever without one update."""
    import torch

    from attnlab.trainer import Trainer, TrainConfig

    data = torch.utils.data.TensorDataset(torch.zeros(3))
    data.lengths = lambda: [4, 4, 4]
    cfg = TrainConfig(max_tokens=4, accum_steps=5, device="cpu", progress=False)
    with pytest.raises(AttnlabError, match=r"train.accum_steps \(5\) exceeds the 3 batches of an epoch"):
        Trainer(torch.nn.Linear(1, 1), cfg, data, data, tmp_path)
