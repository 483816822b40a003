"""The layer rule of docs/architecture.md: a package imports only packages below it, so the broker never
reaches up into the tools that drive it and ZooKeeper code stays reusable by everyone above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# what each top-level package may import of the project (itself always); everything else is third-party
ALLOWED: dict[str, set[str]] = {
    "cluster": {"broker", "controller", "zk", "clusterplane", "traces", "analysis"},
    "broker": {"controller", "zk", "clusterplane", "traces"},
    "controller": {"zk", "clusterplane", "traces"},
    "analysis": {"traces"},
    "zk": set(),
    "clusterplane": set(),
    "traces": set(),
}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """Every project package a module imports, with the line, including imports inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return [(line, name) for line, name in found if name in ALLOWED]


def violations(root: Path) -> list[str]:
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, name in imported_packages(path):
                if name != package and name not in allowed:
                    wrong.append(f"{path.relative_to(root)}:{line} imports {name}/ (a layer above {package}/)")
    return wrong


def test_no_package_imports_one_above_it():
    assert violations(ROOT) == []


@pytest.mark.parametrize(("package", "statement"), [
    ("broker", "from cluster.cli import main"),
    ("controller", "def f():\n    import broker.server\n"),
    ("zk", "from controller.context import ControllerContext"),
    ("traces", "import analysis.schema"),
])
def test_an_upward_import_is_named_with_file_and_line(tmp_path, package, statement):
    for name in ALLOWED:
        (tmp_path / name).mkdir()
    (tmp_path / package / "upward.py").write_text(statement + "\n")
    [violation] = violations(tmp_path)
    assert violation.startswith(f"{package}/upward.py:")
