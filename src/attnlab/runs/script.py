"""The attention explorer's script for a page that no server serves: its ES modules (`attnlab/static/*.js`) joined
into one classic script (`explorer_script`), which the inline explorer of a notebook and `Exploration.save_html`
embed (`attnlab.runs.views.explorer_page`). The served page loads the same modules one by one.
"""

from __future__ import annotations

import re
from importlib.resources import files

STATIC = files("attnlab") / "static"

# a module's import statement, the one form the explorer's modules use: named imports from a sibling module
MODULE_IMPORT = re.compile(r'^import \{([\w\s,]+)\} from "\./([a-z]+\.js)";\n', re.M)
# an exported declaration: a function or a const (whose binding never changes, so a copy of it is the live one)
MODULE_EXPORT = re.compile(r"^export (?=(?:async function|function|const) (\w+))", re.M)
# a top-level declaration (the modules keep their top level at column 0 and indent everything inside it)
MODULE_TOP = re.compile(r"^(?:export )?(?:async function|function|const|let|var|class) (\w+)", re.M)


def explorer_script(entry: str = "app.js") -> str:
    """The explorer's ES modules (static/*.js, from `entry` through its imports) as one classic script, for a page
    that has no server to load them from: a notebook's inline explorer (an <iframe srcdoc>) and `save_html`.

    Why one script: a srcdoc frame or an HTML file has no URL that "./state.js" resolves against, and module scripts
    from data: or blob: URLs cannot import each other by those names without an import map of generated URLs, which
    a sandboxed or content-security-policed notebook frame may refuse; a bundler would be a build step and a
    dependency. Instead, the modules are joined in the order the browser evaluates them (depth-first, each module's
    imports before it, `entry` last) inside one strict-mode function scope, their `import` lines dropped and the
    `export ` before a declaration removed. That is the modules' own semantics, which this checks and refuses
    otherwise: every import is `import {a, b} from "./x.js";` of names that x.js exports (no renaming, default or
    namespace import, so a name means the same declaration everywhere); every export is a function or a const (no
    live `let` binding to lose); no two modules declare the same top-level name (one scope holds them all); and the
    imports form no cycle.
    """
    modules: dict[str, str] = {}  # name: text, in the order they are reached
    exports: dict[str, set[str]] = {}
    order: list[str] = []  # evaluation order: a module after its imports

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"static/ modules import in a cycle: {' -> '.join((*stack, name))}"
        if name in modules:
            return
        text = (STATIC / name).read_text(encoding="utf-8")
        imports = MODULE_IMPORT.findall(text)
        statements = re.findall(r"^import\b", text, re.M)
        assert len(statements) == len(imports) and "import(" not in text and "import.meta" not in text, \
            f"static/{name}: an import not of the form 'import {{a, b}} from \"./x.js\";'"
        exported = MODULE_EXPORT.findall(text)
        assert len(re.findall(r"^export\b", text, re.M)) == len(exported), \
            f"static/{name}: an export that is not 'export function|async function|const NAME'"
        assert not re.search(r"^[ \t]+(?:import|export)\b", text, re.M), f"static/{name}: an indented import or export"
        modules[name] = text
        for names, source in imports:
            assert " as " not in f" {names} ", f"static/{name}: a renamed import from {source}"
            visit(source, (*stack, name))
            missing = set(names.replace(",", " ").split()) - exports[source]
            assert not missing, f"static/{name} imports {sorted(missing)} from {source}, which does not export them"
        exports[name] = set(exported)
        order.append(name)

    visit(entry, ())
    owner: dict[str, str] = {}
    for name in order:
        text = modules[name]
        assert not re.search(r"^(?:export )?(?:const|let|var) [\[{]", text, re.M), \
            f"static/{name}: a top-level destructuring declaration (its names would go unchecked)"
        for top in MODULE_TOP.findall(text):
            assert top not in owner, f"static/{name} and static/{owner[top]} both declare {top} at the top level"
            owner[top] = name
    bodies = [f"// ---- static/{name}\n" + MODULE_EXPORT.sub("", MODULE_IMPORT.sub("", modules[name]))
              for name in order]
    return '(() => {\n"use strict";\n' + "\n".join(bodies) + "})();\n"
