"""The architecture, checked: import direction app -> trainer -> opsd_diag, no cycles, a shallow
``opsd_diag`` import graph and small modules.

Imports are read from the source (every ``import`` statement, function-level ones included), so the
graph is what an import-graph tool sees. ``python tests/test_architecture.py`` prints the depth, the
longest chain and the module sizes.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("opsd_diag", "trainer", "app")
MAX_DEPTH = 6  # modules in the longest opsd_diag import chain, both ends counted
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> project modules it imports (``from pkg import mod`` resolves to the module)."""
    graph = {}
    for mod, path in known.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names] or [node.module]
            else:
                continue
            for n in names:
                if n.split(".")[0] in PACKAGES:
                    target = _resolve(n, known)
                    if target and target != mod:
                        deps.add(target)
        graph[mod] = deps
    return graph


def longest_chain(graph: dict[str, set[str]], root: str = "opsd_diag") -> list[str]:
    @functools.lru_cache(maxsize=None)
    def chain(mod: str, seen: frozenset = frozenset()) -> tuple[str, ...]:
        if mod in seen:
            raise AssertionError(f"import cycle through {mod}")
        best: tuple[str, ...] = ()
        for dep in graph[mod]:
            if dep.split(".")[0] == root and dep != root:
                c = chain(dep, seen | {mod})
                best = max(best, c, key=len)
        return (mod, *best)
    return max((list(chain(m)) for m in graph if m.split(".")[0] == root), key=len)


def test_import_direction():
    graph = imports(modules())
    order = {"opsd_diag": 0, "trainer": 1, "app": 2}
    wrong = [(m, d) for m, deps in graph.items() for d in deps if order[d.split(".")[0]] > order[m.split(".")[0]]]
    assert not wrong, f"imports against app -> trainer -> opsd_diag: {wrong}"


def test_opsd_diag_import_graph_is_shallow_and_acyclic():
    chain = longest_chain(imports(modules()))
    assert len(chain) <= MAX_DEPTH, f"import depth {len(chain)} > {MAX_DEPTH}: {' -> '.join(chain)}"


def test_the_library_holds_the_library():
    """No module outside app/ is imported only by app/: logic only the app uses lives in app/."""
    importers: dict[str, set[str]] = {}
    for mod, deps in imports(modules()).items():
        for dep in deps:
            importers.setdefault(dep, set()).add(mod)
    app_only = sorted(dep for dep, who in importers.items()
                      if dep.split(".")[0] != "app" and all(m.split(".")[0] == "app" for m in who))
    assert not app_only, f"modules outside app/ imported only by app/ (move them into app/): {app_only}"


def test_modules_are_small():
    big = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"



def test_parquet_is_read_only_through_store_parquet_table():
    """Arrow reading from a Python object can abort the process at exit (``store.parquet_table`` says why;
    ``benchmarks/bench_exit.py`` counts it): every Parquet read of the packages goes through that one function."""
    readers = {"read_parquet", "read_table", "ParquetFile", "ParquetDataset"}
    found = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in readers
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("pd", "pq", "pandas")):
                found.append(f"{mod}:{node.lineno}")
    assert found == ["opsd_diag.io.store:" + str(next(
        i for i, line in enumerate((REPO / "opsd_diag/io/store.py").read_text().splitlines(), 1)
        if "return pq.read_table(pa.BufferReader(sink.getvalue()))" in line))]


if __name__ == "__main__":
    known = modules()
    g = imports(known)
    c = longest_chain(g)
    print(f"opsd_diag import depth {len(c)}: {' -> '.join(c)}")
    for m, p in sorted(known.items(), key=lambda kv: -len(kv[1].read_text().splitlines())):
        print(f"{len(p.read_text().splitlines()):5d}  {m}")
