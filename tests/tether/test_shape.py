"""Every part has the same shape (issue 40, item 3), read from the source (plain data):

- ``main.py`` wires: it defines ``main`` and declares no class (the domain objects live in
  modules of their own);
- ``app.py`` holds ``create_app``, the part's Flask app (its API, or only the operations
  surface of a leader-elected part);
- ``settings.py`` declares the part's settings;
- ``metrics.py`` is at the part's bottom floor: it imports no module of its part but the
  part's own metrics and settings modules (scrape-time collectors that read the part's state
  live beside that state)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# each part's folder and the package its modules are imported as
PARTS = {
    "webhook": "webhook",
    "listener": "listener",
    "listener/janitor": "listener.janitor",
    "poller": "poller",
    "compass": "compass",
    "enroller": "enroller",
    "admin": "admin",
    "injector": "injector",
    "canary": "canary",
}
SHAPE = ("main.py", "app.py", "settings.py", "metrics.py")


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _top_level(tree: ast.Module, kind: type) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, kind)}


def _own_imports(tree: ast.Module, root: str) -> set[str]:
    """The modules of the part (``root``, the top-level package) that ``tree`` imports."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == root or node.module.startswith(root + "."):
                found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(root + ".")}
    return found


@pytest.mark.parametrize("folder", sorted(PARTS))
def test_the_part_has_the_four_modules(folder: str) -> None:
    missing = [name for name in SHAPE if not (ROOT / folder / name).is_file()]
    assert not missing, f"{folder}/ lacks {missing}"


@pytest.mark.parametrize("folder", sorted(PARTS))
def test_main_wires_and_declares_no_class(folder: str) -> None:
    tree = _tree(ROOT / folder / "main.py")
    assert "main" in _top_level(tree, ast.FunctionDef)
    assert not _top_level(tree, ast.ClassDef), f"{folder}/main.py declares a class"


@pytest.mark.parametrize("folder", sorted(PARTS))
def test_app_holds_create_app(folder: str) -> None:
    assert "create_app" in _top_level(_tree(ROOT / folder / "app.py"), ast.FunctionDef)


@pytest.mark.parametrize("folder", sorted(PARTS))
def test_metrics_is_at_the_parts_bottom_floor(folder: str) -> None:
    package = PARTS[folder]
    root = package.split(".")[0]
    allowed = {f"{root}.metrics", f"{root}.settings", f"{package}.settings"}
    # ``from listener import metrics as x`` names the module: both spellings are allowed
    allowed |= {f"{root}.metrics.NS"}
    found = _own_imports(_tree(ROOT / folder / "metrics.py"), root) - allowed
    assert not found, f"{folder}/metrics.py imports {sorted(found)} of its part"


def test_the_shape_check_sees_a_violation() -> None:
    """The checks above can fail: a metrics module that reads the part's state is caught."""
    tree = ast.parse("from admin import fleet, snapshot\nfrom admin import settings\n")
    assert _own_imports(tree, "admin") - {"admin.settings"} == {"admin.fleet", "admin.snapshot"}
    assert _top_level(ast.parse("class Enroller: ...\ndef main(): ..."), ast.ClassDef) == {
        "Enroller"
    }
