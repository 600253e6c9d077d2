"""No import circles in mirror_sd/ or ui/.

Every module is parsed with `ast` (imports inside functions count too: a lazy import only
hides a circle), the import graph is built and searched for cycles at two levels:
- modules: `a` imports `b` (`from a.b import c` is an import of a.b when that is a module);
- folders of mirror_sd: each top-level package (engine with engine/mirror, models, cpu,
  proposals, latency, bench, training, gpu_check) is one node, and each module directly in
  mirror_sd/ (cli, options, placement, errors, paths, questions, formats, measured) one node
  of its own; `ui` is one node.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mirror_sd", "ui")


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    out = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path):
    """(line, module, imported name or None) for each import in the file, relative ones
    resolved; `import a.b` gives (line, "a.b", None)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None, alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                yield node.lineno, base, alias.name, alias.asname or alias.name


def imported_names(name: str, path: Path) -> set[str]:
    """Every module name an import statement anywhere in the file names (relative ones
    resolved), with `from X import Y` giving both X and X.Y."""
    names = set()
    for _, module, imported, _ in imports(name, path):
        names.add(module)
        if imported is not None:
            names.add(f"{module}.{imported}")
    return names


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `files` it imports (a name resolves to the longest module
    it starts with; `from pkg import sub` is an import of pkg.sub when that is a module)."""
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_names(name, path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as [a, b, ..., a], or None (iterative depth-first)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def folder_of(module: str) -> str:
    """mirror_sd.engine.mirror.decoder -> mirror_sd.engine; mirror_sd.cli -> mirror_sd.cli;
    ui.anything -> ui."""
    parts = module.split(".")
    if parts[0] != "mirror_sd" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        fa = folder_of(a)
        out.setdefault(fa, set()).update(folder_of(b) for b in targets if folder_of(b) != fa)
    return out


def _package_edges_only(graph: dict[str, set[str]], files: dict[str, Path]) -> dict[str, set[str]]:
    """Drop the edge to a package's __init__ that `from pkg import sub` adds next to pkg.sub:
    an __init__ that runs no code of its own imports nothing back."""
    out = {}
    for a, targets in graph.items():
        keep = set()
        for b in targets:
            is_package = files[b].name == "__init__.py"
            named_sub = any(t.startswith(b + ".") for t in targets)
            if not (is_package and named_sub):
                keep.add(b)
        out[a] = keep
    return out


@pytest.fixture(scope="module")
def graph():
    files = module_files()
    return _package_edges_only(import_graph(files), files)


def test_the_graph_sees_the_packages_and_their_lazy_imports(graph):
    assert {"mirror_sd.cli", "mirror_sd.engine.registry", "ui.session"} <= set(graph)
    assert "mirror_sd.engine.run_path" in graph["mirror_sd.cli"]
    # an import inside a function body counts (run_path loads the models lazily)
    assert "mirror_sd.models.loading" in graph["mirror_sd.engine.run_path"]
    # a relative import in ui/ resolves
    assert "ui.paircheck" in graph["ui.session"]


def test_no_module_imports_itself_back(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_folder_of_mirror_sd_imports_itself_back(graph):
    cycle = find_cycle(folder_graph(graph))
    assert cycle is None, "import circle between folders: " + " -> ".join(cycle)


def test_a_cycle_is_found_and_named():
    synthetic = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(synthetic) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"x": {"x"}}) == ["x", "x"]
    folders = folder_graph({"mirror_sd.models.pair": {"mirror_sd.engine.cross"},
                            "mirror_sd.engine.cross": {"mirror_sd.models.vocab_bridge"},
                            "mirror_sd.models.vocab_bridge": set()})
    assert find_cycle(folders) == ["mirror_sd.engine", "mirror_sd.models", "mirror_sd.engine"]


def test_parsing_resolves_relative_and_lazy_imports(tmp_path):
    pkg = tmp_path / "mirror_sd" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "mirror_sd" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from mirror_sd.sub.a import g\n")
    files = module_files(tmp_path, ("mirror_sd",))
    g = _package_edges_only(import_graph(files), files)
    assert g["mirror_sd.sub.a"] == {"mirror_sd.sub.b"} and g["mirror_sd.sub.b"] == {"mirror_sd.sub.a"}
    assert find_cycle(g) == ["mirror_sd.sub.a", "mirror_sd.sub.b", "mirror_sd.sub.a"]
