"""The shape of the code a reader walks through (issue 48, "a command line built per command").

No function in the package is longer than MAX_FUNCTION_LINES lines of code (its docstring, blank lines and
comment-only lines not counted; a nested function counts in the function that holds it too), apart from the named
offenders of LONG_FUNCTIONS, which only shrinks. The command line is one small `add_<command>` function per
command (app/parser.py), and an option that several commands share is declared in one place (app/options.py), so a new command reuses
it instead of copying it.
"""

import argparse
import ast
import io
import tokenize
from pathlib import Path

import pytest

from attnlab.app import parser as grammar

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"
GRAMMAR = [PACKAGE / "app" / "parser.py", PACKAGE / "app" / "options.py"]  # the command line's grammar
MAX_FUNCTION_LINES = 80
# The functions over the limit when the limit came (issue 48), as "module path:qualified name". Split one into
# named steps and remove its line; an entry that is no longer over the limit (split, moved or renamed) fails
# `test_the_long_functions_are_still_long`, so the list cannot keep a name that no longer needs it.
LONG_FUNCTIONS = {
    "app/server.py:create_app",  # the web app's factory: its routes are nested functions (133 lines)
    "app/guards.py:guarded_h11",  # the HTTP guards around uvicorn's h11 protocol (93 lines)
}
SHARED_OPTIONS = ("--beam", "--split", "--formats", "--engine", "--device")
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}


def code_lines(source: str) -> set[int]:
    """The numbers of the lines that hold code (a token other than a comment or whitespace); every line of a
    multi-line string counts."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def function_lengths(source: str) -> dict[str, int]:
    """Lines of code of each function's body, by qualified name ("Class.method", "outer.inner"): the signature,
    the docstring, blank lines and comment-only lines not counted."""
    code, lengths = code_lines(source), {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = child.body[0]
                docstring = set()
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                        first.value.value, str):
                    docstring = set(range(first.lineno, first.end_lineno + 1))
                body = {line for line in code if first.lineno <= line <= child.end_lineno}
                lengths[prefix + child.name] = len(body - docstring)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def package_function_lengths() -> dict[str, int]:
    """Every function of the package by "module path:qualified name" ("app/parser.py:build_parser")."""
    return {f"{path.relative_to(PACKAGE).as_posix()}:{name}": n
            for path in sorted(PACKAGE.rglob("*.py")) for name, n in function_lengths(path.read_text()).items()}


def test_the_function_length_counts_code_lines_only():
    source = '''
class A:
    def f(self, x):
        """A docstring
        of two lines."""
        # a comment

        y = (x +
             1)
        return """a
string"""

    async def g(self):
        def inner():
            return 1
        return inner()
'''
    assert function_lengths(source) == {"A.f": 4, "A.g": 3, "A.g.inner": 1}


def test_no_function_is_over_the_limit():
    long = {name: n for name, n in package_function_lengths().items()
            if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS}
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines of code (split them into named steps): "
                      + ", ".join(f"{name} ({n})" for name, n in sorted(long.items())))


def test_the_long_functions_are_still_long():
    lengths = package_function_lengths()
    stale = sorted(name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"remove from LONG_FUNCTIONS (no longer a function over the limit): {', '.join(stale)}"


@pytest.mark.parametrize("option", SHARED_OPTIONS)
def test_a_shared_option_is_declared_once(option):
    """`--beam`, `--split`, ... are declared by one parent parser or helper of app/options.py, not by each
    command."""
    literals = [node for path in GRAMMAR for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and node.value == option]
    assert len(literals) == 1, f"{option} is declared {len(literals)} times in app/parser.py and app/options.py"


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(words, parser) of every command and sub-command of the command line."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*words, name), sub
                yield from _commands(sub, (*words, name))


def test_each_command_has_its_add_function():
    """`attnlab plot bleu-by-length` is declared by parser.add_plot_bleu_by_length, and build_parser only calls
    them."""
    missing = ["attnlab " + " ".join(words) for words, _ in _commands(grammar.build_parser())
               if not callable(getattr(grammar, "add_" + "_".join(words).replace("-", "_"), None))]
    assert not missing, f"commands without an add_<command> function in app/parser.py: {', '.join(missing)}"
    assert function_lengths(GRAMMAR[0].read_text())["build_parser"] <= 10
