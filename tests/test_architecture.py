"""The package's shape: imports run down the layers, with no circle, and modules stay small.

Every `import` and `from ... import` of a wherry module counts, including those under
`if TYPE_CHECKING:` and inside functions: a circle hidden from the interpreter is still a
circle for a reader. So does a string that names a wherry module on its own
(`"wherry.log.log"`, `"wherry.cli.topics:topics"`): the lazy-import tables import by name
(a logger's name, given to `getLogger`, is only a name).
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "wherry"

# Every package of wherry/, bottom first. A module may import only modules of its own package
# or of a package below it; the top-level modules (`TOP_MODULES`) sit above them all.
LAYERS = (
    "common",  # shared bits that import nothing of wherry
    "protocol",  # wire formats and codecs
    "purgatory",  # timing wheel, delayed operations
    "runtime",  # clocks, scheduler, tickers, task helpers, state-change log
    "coordination",  # the metadata store (embedded SQLite or ZooKeeper)
    "security",  # principals, ACLs, SASL
    "quotas",  # client quotas
    "log",  # segments, indexes, the partition log
    "outbound",  # connections to other brokers
    "group",  # consumer-group coordinators (classic, KIP-848)
    "txn",  # transaction coordinator
    "share",  # share groups: share-partitions, share coordinator
    "replication",  # ReplicaNode, replica manager, partitions, fetchers
    "coordinator",  # the log-backed coordinators' shared runtime
    "controller",  # the controller
    "observability",  # metrics, HTTP console
    "server",  # network layer, handlers, the broker
    "sim",  # the deterministic simulation
    "testing",  # clusters and fixtures for tests
    "spark",  # the Spark data source
    "cli",  # the command line
)
TOP_MODULES = ("wherry", "wherry.__main__")
# Imports allowed to run against `LAYERS`: (importing package, imported package) -> why.
EXCEPTIONS: Mapping[tuple[str, str], str] = {}
MAX_LINES = 900
MAX_HANDLER_FUNCTION_LINES = 100


def modules(root: Path = ROOT) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def called(node: ast.AST) -> str | None:
    """The name of the function a call calls (`f(...)`, `x.f(...)`), None if not a call."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The wherry modules `name` imports (a package's `__init__` stands for the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = ast.parse(path.read_text(), str(path))
    logger_names = {
        id(arg) for call in ast.walk(tree) if called(call) == "getLogger" for arg in call.args
    }
    for node in ast.walk(tree):
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
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in logger_names
        ):
            dotted = node.value.partition(":")[0]
            targets = [dotted] if dotted.startswith("wherry.") and dotted in known else []
        else:
            continue
        for t in targets:
            if t.split(".")[0] == "wherry" and (m := owner(t)) is not None and m != name:
                yield m


@functools.cache
def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
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


def package_of(module: str) -> str:
    """The package of wherry/ a module belongs to; a top-level module stands for itself."""
    return module if module in TOP_MODULES else module.split(".")[1]


def rank(package: str) -> int | None:
    """A package's place in `LAYERS` (top-level modules above them all); None if unplaced."""
    if package in TOP_MODULES:
        return len(LAYERS)
    return LAYERS.index(package) if package in LAYERS else None


def unplaced(names: Iterable[str]) -> list[str]:
    """The packages (or top-level modules) of these modules that `LAYERS` does not place."""
    return sorted({p for m in names if rank(p := package_of(m)) is None})


def upward_imports(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Every import of a module of a higher package than the importer's, but the exceptions."""
    found = []
    for m, targets in edges.items():
        for t in targets:
            low, high = rank(package_of(m)), rank(package_of(t))
            if low is None or high is None:
                continue  # reported by `unplaced`
            if high > low and (package_of(m), package_of(t)) not in EXCEPTIONS:
                found.append(f"{m} -> {t}")
    return sorted(found)


def test_there_is_no_import_circle() -> None:
    assert cycles(graph()) == []


def test_every_package_is_placed_in_the_layers() -> None:
    assert unplaced(modules()) == []


def test_imports_run_down_the_layers() -> None:
    assert upward_imports(graph()) == []


def test_the_exceptions_name_placed_packages_and_a_reason() -> None:
    for (low, high), reason in EXCEPTIONS.items():
        assert rank(low) is not None and rank(high) is not None
        assert reason.strip()


def test_no_module_is_over_the_size_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
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


def long_functions(root: Path, limit: int) -> dict[str, int]:
    """`path:function` -> length in lines, for every function of `root` longer than `limit`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found[f"{path.relative_to(root.parent)}:{node.name}"] = length
    return found


def test_no_handler_function_is_over_the_length_limit() -> None:
    assert long_functions(ROOT / "server" / "handlers", MAX_HANDLER_FUNCTION_LINES) == {}


def test_the_length_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_HANDLER_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"async def handle() -> None:\n{body}")
    (tmp_path / "short.py").write_text("def fine() -> None:\n    pass\n")
    found = long_functions(tmp_path, MAX_HANDLER_FUNCTION_LINES)
    assert found == {f"{tmp_path.name}/long.py:handle": MAX_HANDLER_FUNCTION_LINES + 1}


# Upward imports the layering tests plant: (importing module, its source, imported module).
# Each is written in a different way the import reader must see.
PLANTED = (
    (
        "wherry.log.planted",
        "from wherry.replication.partition import Partition\n",
        "wherry.replication.partition",
    ),
    (
        "wherry.protocol.planted",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wherry.sim import world\n",
        "wherry.sim.world",
    ),
    (
        "wherry.share.planted",
        "def late() -> None:\n    from ..server import broker\n",
        "wherry.server.broker",
    ),
    ("wherry.common.planted", '_LAZY = {"Log": ("wherry.log.log", "Log")}\n', "wherry.log.log"),
    ("wherry.cli.planted", "import wherry.__main__\n", "wherry.__main__"),
)


@pytest.mark.parametrize(("module", "_source", "target"), PLANTED)
def test_the_layer_check_reports_an_upward_import(module: str, _source: str, target: str) -> None:
    edges = {module: {target}, target: set(), "wherry.log.log": {"wherry.common.lazy"}}
    assert upward_imports(edges) == [f"{module} -> {target}"]


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("wherry.replication.partition", "wherry.log.log"),  # down
        ("wherry.log.log", "wherry.log.segment"),  # same package
        ("wherry.server.handlers.fetch", "wherry.server.broker"),  # same package, nested
        ("wherry.__main__", "wherry.cli.entry"),  # a top-level module imports anything
        ("wherry.cli.main", "wherry.common.lazy"),
    ],
)
def test_the_layer_check_allows_a_downward_import(module: str, target: str) -> None:
    assert upward_imports({module: {target}}) == []


def test_the_layer_check_honours_a_named_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    edges = {"wherry.log.planted": {"wherry.replication.partition"}}
    monkeypatch.setitem(globals(), "EXCEPTIONS", {("log", "replication"): "a reason"})
    assert upward_imports(edges) == []


def test_an_unplaced_package_is_reported() -> None:
    assert unplaced(["wherry.log.log", "wherry.newpkg.x", "wherry.stray", "wherry"]) == [
        "newpkg",
        "stray",
    ]


@pytest.fixture(scope="module")
def planted_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package's source with the `PLANTED` modules and an unplaced package."""
    root = tmp_path_factory.mktemp("planted") / "wherry"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "static"))
    for module, source, _ in PLANTED:
        (root / Path(*module.split(".")[1:])).with_suffix(".py").write_text(source)
    (root / "newpkg").mkdir()
    (root / "newpkg" / "__init__.py").write_text("")
    return root


@pytest.fixture(scope="module")
def planted_upward(planted_tree: Path) -> list[str]:
    return upward_imports(graph(planted_tree))


@pytest.mark.parametrize(("module", "_source", "target"), PLANTED)
def test_a_planted_upward_import_in_the_tree_is_reported(
    planted_upward: list[str], module: str, _source: str, target: str
) -> None:
    assert f"{module} -> {target}" in planted_upward


def test_the_planted_tree_reports_only_what_was_planted(
    planted_tree: Path, planted_upward: list[str]
) -> None:
    assert planted_upward == sorted(f"{m} -> {t}" for m, _, t in PLANTED)
    assert unplaced(modules(planted_tree)) == ["newpkg"]
