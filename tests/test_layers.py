"""The package's rooms and layers (docs/architecture.md, the import-linter contracts in pyproject.toml): imports
point down, between the subpackages and inside each.

`lint-imports` checks the contract on the package as it is; the same check on a copy with one upward import added
must fail (so the contract is not vacuous); and no attnlab module imports another attnlab module inside a
function, which would hide an import from a reader (import-linter counts those too, but a hidden downward import
is still a sign of a misplaced function).
"""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
MAX_LINES = 600


def package_modules() -> list[str]:
    """Every module of the package as a path under src/attnlab ("nn/attention.py"), `__init__` files left out."""
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name not in ("__init__.py",
                                                                                                "__main__.py"))


def lint_imports(config: Path, python_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.argv[0] = 'lint-imports'; lint_imports_command()",
                           "--config", str(config), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_contract_is_kept():
    result = lint_imports(ROOT / "pyproject.toml", ROOT / "src", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module,upward", [
    ("core.fileio", "app.server"),              # the ground floor on the top floor
    ("training.trainer", "families.table"),     # a room on the room above it
    ("decode.translate", "training.trainer"),   # decoding never imports the trainer (side by side)
    ("families.lm", "families.translation"),    # inside a room: a family on the one above it
    ("kernels.dropout", "kernels.loss"),        # kernels stand alone
    ("app.commands", "data.corpus"),            # a command goes through the API, even downward
    ("app.cli", "runs.workflow"),               # and so does the grammar
    ("interop.marian", "runs.shipped"),         # the pipeline stands on the toolkits it converts to
])
def test_an_upward_import_breaks_the_contract(tmp_path, module, upward):
    copy = tmp_path / "src" / "attnlab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static", "configs"))
    with open(copy / (module.replace(".", "/") + ".py"), "a") as f:
        f.write(f"\nimport attnlab.{upward}  # noqa: E402, F401  (a deliberate upward import)\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = lint_imports(tmp_path / "pyproject.toml", tmp_path / "src", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout and f"attnlab.{module} -> attnlab.{upward} (l." in result.stdout


def test_no_attnlab_import_inside_a_function():
    hidden = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if any(n == "attnlab" or n.startswith("attnlab.") for n in names):
                    hidden.append(f"{path.relative_to(PACKAGE)}:{node.lineno} in {fn.name}()")
    assert not hidden, "imports of attnlab modules inside functions: " + ", ".join(hidden)


def named_in_contracts() -> set[str]:
    """Every module a contract names, dotted under attnlab ("nn.attention"), and every package of the top one."""
    named = set()
    for contract in CONTRACTS:
        for layer in contract.get("layers", []):
            for name in layer.split("|"):
                for container in contract.get("containers", []):
                    named.add(f"{container}.{name.strip()}".removeprefix("attnlab."))
        named |= {m.removeprefix("attnlab.") for m in contract.get("modules", [])}
    return named


def test_every_module_has_a_layer():
    """`exhaustive = true` makes lint-imports name a module missing from a contract; this says so earlier, for
    the packages and for every module in them."""
    named = named_in_contracts()
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {m.removesuffix(".py").replace("/", ".") for m in package_modules()}
    assert packages - named == set(), f"packages without a layer in pyproject.toml: {sorted(packages - named)}"
    assert modules - named == set(), f"modules without a layer in pyproject.toml: {sorted(modules - named)}"
    assert [m for m in modules if "." not in m] == [], "every module lives in a package (a room)"


def test_no_module_is_over_the_line_limit():
    long = {m: n for m in package_modules() if (n := len((PACKAGE / m).read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_every_module_and_benchmark_is_where_a_reader_looks():
    """A module missing from docs/architecture.md's concept table or from README's Layout section, a benchmark
    missing from benchmarks/README.md, or a script missing from scripts/README.md, fails here: the maps stay true
    as the code changes."""
    repo = Path(__file__).resolve().parents[1]
    architecture = (repo / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = architecture.split("## Where each concept lives", 1)[1].split("\n## ", 1)[0]
    layout = (repo / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    modules = package_modules()
    assert len(modules) > 40
    assert [m for m in modules if f"`{m}`" not in table] == []
    assert [m for m in modules if f"`{m}`" not in layout] == []
    for folder, kinds in (("benchmarks", (".py", ".sh", ".conf")), ("scripts", (".py", ".sh"))):
        index = (repo / folder / "README.md").read_text(encoding="utf-8")
        files = sorted(p.name for p in (repo / folder).iterdir() if p.suffix in kinds)
        assert len(files) > 5, folder
        assert [f"{folder}/{name}" for name in files if f"`{name}`" not in index] == []


def test_every_model_network_is_in_nn():
    """docs/architecture.md, "Where things go": every `nn.Module` that computes a model is in `attnlab.nn`; a family
    owns its config, data and task hooks only."""
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name in ("nn", "kernels"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) in ("nn.Module", "torch.nn.Module")
                                                      for b in node.bases):
                outside.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert outside == [], "nn.Module subclasses outside attnlab.nn: " + ", ".join(outside)


def test_every_package_init_names_its_modules():
    """docs/architecture.md: each package's `__init__` says in one paragraph what it holds, naming each module."""
    missing = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        missing += [f"{init.parent.name}.{p.stem}" for p in sorted(init.parent.glob("*.py"))
                    if p.stem != "__init__" and f"`{p.stem}`" not in doc]
    assert missing == [], f"modules their package's __init__ docstring does not name: {missing}"
