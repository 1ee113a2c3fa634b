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
