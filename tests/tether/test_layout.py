"""The product stays readable in small pieces (issue 23): no module over 400 lines, no
function over 60. A part that grows past them is split by what it holds, not by size."""

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
