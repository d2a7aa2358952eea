"""The shape of the code a newcomer reads (issue 18's "done when", issue 30's walls): the packages
import each other without a circle and only through the doors MAY_IMPORT names, and no function
takes more than seven parameters outside the Typer commands (whose parameters are the command
line's flags).

Imports are read from the source with ``ast``, function-local ones included (a local import
hides a circle rather than removing it); only ``if TYPE_CHECKING:`` blocks are left out, and the
CLI's self-registration (``builder.cli.main`` importing the command modules that import it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "builder",
    "gateway",
    "loadtests",
    "serving_contract",
    "feast_access",
    "feature_repo",
    "support",
    "tools",
)
# The walls between the rooms: which of our packages each may import (at run time). The wheel's
# packages (builder, gateway, loadtests, feast_access, feature_repo) never reach the test harness
# (support), the release tooling (tools), the demo or the benchmarks; builder and gateway never
# each other. Feast is reached through feast_access (builder never); to the product, the demo's
# feature_repo is a path (--feature-repo), imported only by support, tests, demo and benchmarks.
# The serving contract (what builder writes and every client reads) is the one door builder and
# the gateway share, and imports nothing of ours.
MAY_IMPORT: dict[str, frozenset[str]] = {
    # builder score joins a model's feature service offline (builder/score/): the views it reads
    # through feast_access.offline, never Feast itself
    "builder": frozenset({"serving_contract", "feast_access"}),
    "gateway": frozenset({"serving_contract", "feast_access"}),
    "loadtests": frozenset({"serving_contract", "feast_access"}),
    "serving_contract": frozenset(),
    "feast_access": frozenset(),
    "feature_repo": frozenset({"feast_access"}),
    "support": frozenset({"builder", "serving_contract", "feast_access", "feature_repo"}),
    "tools": frozenset({"builder", "serving_contract", "feature_repo", "support"}),
}
# Checked for long parameter lists too: the code around the packages.
SCRIPTS = ("benchmarks", "demo")
MAX_PARAMETERS = 7
# builder.cli.main imports the command modules once, so that each registers its commands on
# the app it imports from main: the one circle Typer's layout asks for.
REGISTRATION = {
    ("builder.cli.main", f"builder.cli.{c}")
    for c in ("export", "release", "score", "serve", "tune", "validate")
}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "proto" in path.parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, each resolved to the module (not the symbol)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and (name, target) not in REGISTRATION:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (Tarjan's strongly connected components larger than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_packages_import_each_other_without_a_circle() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    # A package's __init__ importing its own modules is no circle of the design: leave out
    # the edges from a module to the package it lives in.
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not name.startswith(f"{t}.")}
    assert cycles(graph) == []


def breaches(graph: dict[str, set[str]], may_import: dict[str, frozenset[str]]) -> list[str]:
    """Every import that crosses a wall: ``module -> target`` where the target's package is
    neither the module's own nor one its package may import."""
    found = []
    for name, targets in sorted(graph.items()):
        home = name.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != home and other not in may_import.get(home, frozenset()):
                found.append(f"{name} -> {target}")
    return found


def test_every_import_between_packages_goes_through_a_door() -> None:
    known = modules()
    assert set(MAY_IMPORT) == set(PACKAGES)
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert breaches(graph, MAY_IMPORT) == []


def test_a_planted_import_through_a_wall_is_found(tmp_path: Path) -> None:
    """The rule's own check: a gateway module importing builder, read from a real file."""
    planted = tmp_path / "gateway" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("from builder.kinds import ModelKind\nimport gateway.catalog\n")
    known = {**modules(), "gateway.planted": planted}
    graph = {"gateway.planted": imports_of("gateway.planted", planted, known)}
    assert breaches(graph, MAY_IMPORT) == ["gateway.planted -> builder.kinds"]


def test_the_cycle_finder_sees_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _is_typer_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(".command" in ast.unparse(d) or ".callback" in ast.unparse(d) for d in node.decorator_list)


@pytest.mark.parametrize("package", PACKAGES + SCRIPTS)
def test_no_function_takes_more_than_seven_parameters(package: str) -> None:
    too_many = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _is_typer_command(node):
                continue
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            names = [n for n in names if n not in ("self", "cls")]
            if len(names) > MAX_PARAMETERS:
                too_many.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({len(names)})")
    assert too_many == []


@pytest.mark.parametrize("package", PACKAGES + SCRIPTS)
def test_support_code_comes_from_support_not_from_the_tests(package: str) -> None:
    """Servers, model factories and load generation live in ``support/``: nothing outside
    ``tests/`` imports ``tests``, and nothing outside ``demo/`` imports ``demo``."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in _runtime_nodes(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top == "tests" or (top == "demo" and package != "demo"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert found == []


def test_modules_imported_by_tests(tmp_path: Path) -> None:
    """The rule's own check on planted files: a test module importing another test module's
    name, and a conftest exporting a helper class, are both found."""
    tests = tmp_path / "tests"
    (tests / "gateway").mkdir(parents=True)
    (tests / "gateway" / "test_b.py").write_text("from tests.gateway.test_a import ROWS\n")
    (tests / "gateway" / "conftest.py").write_text("import pytest\n\nclass Stack:\n    pass\n")
    assert imports_of_test_modules(tests) == ["tests/gateway/test_b.py:1 imports tests.gateway.test_a"]
    assert conftest_exports(tests) == ["tests/gateway/conftest.py:3 class Stack"]


def imports_of_test_modules(tests: Path) -> list[str]:
    """Imports of a ``test_*`` module by any module under ``tests/``: shared helpers belong in
    the folder's ``helpers.py``, so running one test file never runs (or collects) another's."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in _runtime_nodes(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
                names += [f"{node.module}.{a.name}" for a in node.names]
            hits = [n for n in names if n.split(".")[-1].startswith("test_")]
            found += [f"{path.relative_to(tests.parent)}:{node.lineno} imports {hit}" for hit in hits[:1]]
    return found


def conftest_exports(tests: Path) -> list[str]:
    """What a ``conftest.py`` defines besides fixtures and pytest hooks: conftests hold fixtures
    only (pytest imports them itself; a helper defined there cannot be imported cleanly)."""
    found = []
    for path in sorted(tests.rglob("conftest.py")):
        for node in ast.parse(path.read_text()).body:
            where = f"{path.relative_to(tests.parent)}:{node.lineno}"
            if isinstance(node, ast.ClassDef):
                found.append(f"{where} class {node.name}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                fixture = any(
                    "fixture" in ast.unparse(d) or "hookimpl" in ast.unparse(d) for d in node.decorator_list
                )
                if not fixture and not node.name.startswith("pytest_"):
                    found.append(f"{where} def {node.name}")
    return found


def test_tests_share_helpers_not_test_modules() -> None:
    assert imports_of_test_modules(ROOT / "tests") == []


def test_conftests_hold_fixtures_only() -> None:
    assert conftest_exports(ROOT / "tests") == []
