"""The product stays readable in small pieces (issue 23): no module over 400 lines, no
function over 60. A part that grows past them is split by what it holds, not by size.
The tests share one harness (issue 39): what several test modules use lives in testing/
(helpers) or a directory's conftest.py (fixtures), and no test module imports another."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ("tether", "webhook", "listener", "poller", "compass", "enroller", "admin", "injector")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[pathlib.Path]:
    found = [p for part in PRODUCT for p in sorted((ROOT / part).rglob("*.py"))]
    assert len(found) > 100  # the walk found the product
    return found


def test_no_product_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_product_function_is_over_60_lines() -> None:
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert long == {}


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
    imports = {str(p.relative_to(ROOT)): found for p in files
               if (found := _imports_of_tests(ast.parse(p.read_text())))}
    assert imports == {}, "move what is shared to testing/ (helpers) or conftest.py (fixtures)"
