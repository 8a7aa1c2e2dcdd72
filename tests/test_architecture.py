"""The package's shape: imports run down the layers, with no circle, and modules stay small.

Every `import` and `from ... import` of a wherry module counts, including those under
`if TYPE_CHECKING:` and inside functions: a circle hidden from the interpreter is still a
circle for a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "wherry"

# Packages that hold the broker's domain logic; they never import the broker's top layers.
LOWER = (
    "replication", "controller", "group", "txn", "log", "protocol", "outbound", "purgatory",
    "security", "observability", "quotas",
)
TOP = ("server", "cli")
MAX_LINES = 900
# Wire schemas written out field by field (Kafka's JSON message definitions, by hand).
LONG_TABLES = {"protocol/interbroker_codec.py"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The wherry modules `name` imports (a package's `__init__` stands for the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the module mod; `from mod import name`, mod.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for t in targets:
            if t.split(".")[0] == "wherry" and (m := owner(t)) is not None and m != name:
                yield m


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, without recursion);
    a module importing itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in edges[v]:
                    found.append(sorted(component))
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_there_is_no_import_circle() -> None:
    assert cycles(graph()) == []


def test_lower_layers_never_import_the_server_or_the_cli() -> None:
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in graph().items()
        if layer(m) in LOWER
        for t in targets
        if layer(t) in TOP
    )
    assert upward == []


def test_no_module_is_over_the_size_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
        and str(p.relative_to(ROOT)) not in LONG_TABLES
    }
    assert long == {}


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"], ["d"]]),
    ],
)
def test_the_circle_finder_finds_circles(
    edges: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert cycles(edges) == expected


def test_the_import_reader_sees_type_checking_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "wherry"
    (pkg / "server").mkdir(parents=True)
    (pkg / "replication").mkdir()
    for f in ("__init__.py", "server/__init__.py", "replication/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "server" / "broker.py").write_text("")
    (pkg / "replication" / "other.py").write_text("")
    (pkg / "replication" / "node.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import other\n"
        "if TYPE_CHECKING:\n"
        "    from wherry.server.broker import Broker\n"
    )
    known = modules(pkg)
    found = set(imported("wherry.replication.node", known["wherry.replication.node"], known))
    assert found == {"wherry.server.broker", "wherry.replication.other"}
