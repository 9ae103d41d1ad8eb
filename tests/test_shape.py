"""The shape the tools cannot see: module sizes, package __init__ files, who imports pynvml and torch.

(ruff, mypy and import-linter run in bin/test before the tests; pyproject.toml holds their rules.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "gpudoc"
MAX_LINES = 400
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_grows_past_the_limit(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{_name(path)} has {lines} lines (limit {MAX_LINES}): split it by concept"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("__init__.py")), ids=_name)
def test_package_init_files_only_re_export(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        allowed = isinstance(node, (ast.Import, ast.ImportFrom)) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)  # the docstring
        ) or (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id in ("__all__", "__version__")
                                                   for t in node.targets))
        assert allowed, f"{_name(path)}:{node.lineno}: logic in a package __init__ (move it to a named module)"


def test_only_the_nvml_wrapper_imports_pynvml_and_nothing_imports_torch():
    users = {_name(p) for p in MODULES if "pynvml" in _imports(p)}
    assert users == {"facts/nvml.py"}
    # The simulation helper and the probe run in the job's interpreter (by path, never imported by gpudoc).
    assert {_name(p) for p in MODULES if "torch" in _imports(p)} <= {
        _name(p) for p in MODULES if p.parent.name in ("simhelper", "probe")}


def test_nothing_in_gpudoc_imports_the_simulation_helper():
    helper = PACKAGE / "simhelper"
    outside = [p for p in MODULES if p.parent != helper]
    assert not [_name(p) for p in outside if "simhelper" in _import_paths(p)]


def _import_paths(path: Path) -> str:
    text = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            text += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            text.append(node.module)
    return " ".join(text)
