"""No two source files import each other, directly or round a loop (docs/architecture.md).

A loop of imports means neither file can be read, tested or reused without the other: the
pieces of one component know each other's insides. TYPE_CHECKING and function-level imports
count too, since they are the same coupling with the error deferred. Each cycle is a strongly
connected component of the file graph; KNOWN lists any still being taken apart (none now), and it
may only shrink: a new cycle fails, and so does a known one that is gone (delete its entry).
"""

from __future__ import annotations

from pathlib import Path

from tests.paths import REPO
from tests.source_ast import imported_names

ROOT = REPO
PACKAGES = ("gossip_tts", "peer", "protocol", "async_opt", "simnet")
KNOWN: set[frozenset[str]] = set()


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of PACKAGES (a package is its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of PACKAGES it imports. An import of a module's own enclosing
    package is left out: a package's __init__ is read first by every module inside it."""
    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = {owner(name) for name in imported_names(path, package)}
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def file_cycles() -> set[frozenset[str]]:
    files = module_files()
    return {frozenset(str(files[m].relative_to(ROOT)) for m in c) for c in cycles(import_graph(files))}


def test_no_source_file_imports_another_in_a_loop() -> None:
    new = file_cycles() - KNOWN
    assert not new, "import cycles between files: " + "; ".join(" <-> ".join(sorted(c)) for c in new)


def test_the_known_cycles_are_still_there_or_struck_off() -> None:
    gone = KNOWN - file_cycles()
    assert not gone, "these cycles are gone (or changed): delete or update their KNOWN entry: " + "; ".join(
        " <-> ".join(sorted(c)) for c in gone)


def test_the_check_sees_a_loop_through_a_lazy_and_a_type_checking_import(tmp_path: Path) -> None:
    """The control: a loop made only of a function-level and a TYPE_CHECKING import is found."""
    (tmp_path / "a.py").write_text("def f():\n    from pkg import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    files = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py", "pkg.c": tmp_path / "c.py"}
    assert cycles(import_graph(files)) == [{"pkg.a", "pkg.b"}]
