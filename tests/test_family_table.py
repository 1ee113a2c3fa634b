"""Nothing outside `attnlab.families` tests a family (issue 37, docs/architecture.md "Adding a model family").

What a family can do lives in its own module as a hook on its row (`attnlab.families.base.Family`: abilities,
explorer, export), and the apps ask the row. So no module outside src/attnlab/families/ may hold a row's name as a
string literal ("transformer", "rnn", "lm", "pair", "series": compared, used as a key, or listed) or name a model
class a row builds (in an `isinstance`, a constructor call, an import). Both lists come from the table itself:
the names of `FAMILIES`, and the class of the model each row's `build_model` returns for every packaged config
(built on the meta device: shapes, no weights).

What is not a family test and is allowed:
- a module may name a class it defines itself: `attnlab.nn` holds the models as the papers write them
  (`nn/transformer.py` defines `TransformerSeq2Seq`), and the family modules pick them from there;
- words inside longer strings (docstrings, messages, help texts: "a Transformer run") and comments;
- the config classes (`ExperimentConfig`, ...) as type hints of the apps that take one family's config by design
  (the report's translation runs, the series study): they are the family's vocabulary, not a test of a run;
- the few literals in `ALLOWED`, each with its reason.
"""

import ast
import io
import tokenize
import warnings
from pathlib import Path

import pytest
import torch

from attnlab.core.errors import AttnlabError
from attnlab.families.table import FAMILIES, load_family_config
from attnlab.runs.workflow import ShapesOnly

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnlab"
CONFIGS = PACKAGE / "configs"

# (module under src/attnlab, the literal, a piece of its line): a word that equals a family's name by coincidence
ALLOWED = {
    ("app/parser.py", "series", 'add_parser("series"'):
        "the name of the `attnlab series` command, a word of the CLI's grammar the user types, not a run's family",
}


def family_names() -> set[str]:
    return {f.name for f in FAMILIES}


def model_classes() -> dict[str, set[str]]:
    """{class name: the families whose build_model returns one}, over every packaged config. A config whose model
    cannot be built here (MiniLM without its weights package) is left out; every row still has a class."""
    classes: dict[str, set[str]] = {}
    for path in sorted(CONFIGS.rglob("*.toml")):
        family, cfg = load_family_config(path)
        try:
            with warnings.catch_warnings(), torch.device("meta"), ShapesOnly():
                warnings.simplefilter("ignore")  # a pretrained model copies its weights into meta tensors: a no-op
                model = family.build_model(cfg, None)
        except (AttnlabError, ImportError, FileNotFoundError):
            continue
        classes.setdefault(type(model).__name__, set()).add(family.name)
    return classes


def defined_classes(source: str) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)}


def family_tests(source: str, module: str, names: set[str], classes: set[str]) -> list[str]:
    """`module:line: what` for each family name as a string literal and each family model class named in code
    (a name, not a word in a string or a comment), but the classes the module defines and the ALLOWED literals."""
    lines = source.splitlines()
    own = defined_classes(source)
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        line = lines[tok.start[0] - 1] if tok.type in (tokenize.STRING, tokenize.NAME) else ""
        if tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # an f-string: never a bare family name
                continue
            if value in names and not any(m == module and v == value and piece in line for m, v, piece in ALLOWED):
                found.append(f"{module}:{tok.start[0]}: the family name {tok.string}: {line.strip()}")
        elif tok.type == tokenize.NAME and tok.string in classes and tok.string not in own:
            found.append(f"{module}:{tok.start[0]}: the family model class {tok.string}: {line.strip()}")
    return found


def outside_families() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "families")


def test_every_row_builds_a_model_class_the_grep_knows():
    classes = model_classes()
    assert {f for rows in classes.values() for f in rows} == family_names(), classes
    assert {"TransformerSeq2Seq", "RNNSeq2Seq", "TransformerLM", "DecomposableAttention", "SeriesRNN"} <= set(classes)


def test_no_module_outside_families_tests_a_family():
    names, classes = family_names(), set(model_classes())
    modules = outside_families()
    assert len(modules) > 30 and not any("families" in str(p.relative_to(PACKAGE)) for p in modules)
    found = [hit for path in modules
             for hit in family_tests(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix(), names,
                                     classes)]
    assert found == [], ("family knowledge outside attnlab/families (ask the family's row: abilities, explorer, "
                         "export; or give the row a hook in its module):\n" + "\n".join(found))


def test_every_allowed_literal_is_still_there():
    """An exception that no longer matches anything is removed, so the list stays the few that are needed."""
    for module, value, piece in ALLOWED:
        source = (PACKAGE / module).read_text(encoding="utf-8")
        assert any(piece in line and f'"{value}"' in line for line in source.splitlines()), (module, value)


@pytest.mark.parametrize("source, expected", [
    ('if run.family.name == "transformer":\n    pass\n', ['the family name "transformer"']),
    ("kind = {'lm': 1}[family]\n", ["the family name 'lm'"]),
    ("from attnlab.nn.transformer import TransformerSeq2Seq\nok = isinstance(m, TransformerSeq2Seq)\n",
     ["the family model class TransformerSeq2Seq"] * 2),
    ('"""A docstring about the transformer and rnn families."""\n# family.name == "rnn" in a comment\n', []),
    ('class SeriesRNN:\n    pass\nx = SeriesRNN()\n', []),  # a module may name the class it defines
    ('p = sub.add_parser("series", help="...")\n', []),  # the allowed command name, in its module only
])
def test_the_grep_finds_a_family_test(source, expected):
    """The check can fail: a name compared or used as a key, a class in isinstance or an import, each named with
    its line; docstrings, comments and a module's own classes pass."""
    found = family_tests(source, "app/parser.py", family_names(), set(model_classes()))
    assert [hit.split(": ", 2)[1] for hit in found] == expected
    assert all(hit.startswith("app/parser.py:") for hit in found)
    if "series" in source and "add_parser" in source:
        assert family_tests(source, "app/server.py", family_names(), set()) != []
