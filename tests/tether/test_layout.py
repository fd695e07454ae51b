"""The product stays readable in small pieces: no module over 600 lines as ruff format lays
it out, no function of more than 50 statements (a count no layout changes: a reader holds
statements, not lines). A part that grows past them is split by what it holds, not by
squeezing lines (issue 40, item 4; the rule was 400 lines and 60 lines a function before the
formatter ran).
The tests share one harness (issue 39): what several test modules use lives in testing/
(helpers) or a directory's conftest.py (fixtures), and no test module imports another."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = (
    "command",
    "tether",
    "webhook",
    "listener",
    "poller",
    "compass",
    "enroller",
    "admin",
    "injector",
    "canary",
)
MAX_MODULE_LINES = 600
MAX_FUNCTION_STATEMENTS = 50


def _modules() -> list[pathlib.Path]:
    found = [p for part in PRODUCT for p in sorted((ROOT / part).rglob("*.py"))]
    assert len(found) > 100  # the walk found the product
    return found


def test_no_product_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def statements(node: ast.AST) -> int:
    """The statements in a function's body, nested ones included (not the def itself)."""
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.stmt)) - 1


def test_no_product_function_has_more_than_50_statements() -> None:
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if (n := statements(node)) > MAX_FUNCTION_STATEMENTS:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert long == {}


def test_statements_are_counted_whatever_the_layout() -> None:
    one = ast.parse("def f(a):\n    x = [a,\n         a]\n    if x:\n        return x\n")
    two = ast.parse("def f(a):\n    x = [a, a]\n    if x: return x\n")
    assert statements(one.body[0]) == statements(two.body[0]) == 3


def _imports_of_tests(tree: ast.AST) -> list[str]:
    """The modules of tests/ that ``tree`` imports: ``tests...`` by name, or relatively."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0 or (node.module or "").split(".")[0] == "tests":
                found.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "tests"]
    return found


def test_no_test_module_imports_another() -> None:
    files = [p for p in sorted((ROOT / "tests").rglob("*.py")) if p.name != "conftest.py"]
    assert len(files) > 100  # the walk found the tests
    imports = {
        str(p.relative_to(ROOT)): found
        for p in files
        if (found := _imports_of_tests(ast.parse(p.read_text())))
    }
    assert imports == {}, "move what is shared to testing/ (helpers) or conftest.py (fixtures)"
