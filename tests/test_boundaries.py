"""The packages' boundaries, read from the source with `ast` (imports inside functions count):

- the benchmark is a leaf: only mirror_sd/bench itself and the pair report (mirror_sd/report)
  import mirror_sd.bench; nothing in ui/, mirror_sd/cli.py or the engine's packages does;
- the pair report uses the benchmark through its public interface only: names of
  `mirror_sd.bench.__all__`, imported from the package itself;
- no private name (`_x`) crosses a folder: neither imported (`from a import _x`, a module
  `a._x`) nor read off an imported module (`mod._x`).
Folders are test_imports.folder_of's: each top-level package of mirror_sd, each module directly
in mirror_sd/, and ui/.
"""
from __future__ import annotations

import ast
from pathlib import Path

from test_imports import ROOT, folder_of, imports, module_files

BENCH = "mirror_sd.bench"
MAY_IMPORT_BENCH = ("mirror_sd.bench", "mirror_sd.report")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def bench_public(root: Path = ROOT) -> set[str]:
    """`__all__` of mirror_sd/bench/__init__.py, read from its source."""
    tree = ast.parse((root / "mirror_sd" / "bench" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # sorted(_HOMES)
                value = value.args[0]
            if isinstance(value, (ast.List, ast.Tuple)):
                return {ast.literal_eval(e) for e in value.elts}
            homes = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                         and getattr(n.targets[0], "id", None) == getattr(value, "id", None))
            return {ast.literal_eval(k) for k in homes.keys}
    return set()


def violations(root: Path = ROOT, packages=("mirror_sd", "ui")) -> list[str]:
    files = module_files(root, packages)
    public = bench_public(root) if (root / "mirror_sd" / "bench" / "__init__.py").exists() else set()
    out = []
    for name, path in files.items():
        here = folder_of(name)
        where = f"{path.relative_to(root)}"
        modules = {}  # local name -> a module of another folder
        for line, module, imported, local in imports(name, path):
            full = f"{module}.{imported}" if imported else module
            if full == BENCH or full.startswith(BENCH + "."):
                if here not in MAY_IMPORT_BENCH:
                    out.append(f"{where}:{line} imports {full} (the benchmark is a leaf)")
                elif here == "mirror_sd.report" and not (module == BENCH and imported in public):
                    out.append(f"{where}:{line} imports {full}: not the benchmark's public interface")
            if not module.startswith(("mirror_sd", "ui")):
                continue
            target = full if full in files else module
            if folder_of(target) == here:
                continue
            if any(_private(part) for part in full.split(".")):
                out.append(f"{where}:{line} imports the private {full} from another folder")
            if full in files:
                modules[local] = full
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules and _private(node.attr)):
                out.append(f"{where}:{node.lineno} reads the private {modules[node.value.id]}.{node.attr}")
    return out


def test_the_benchmark_is_a_leaf_and_no_private_name_crosses_a_folder():
    found = violations()
    assert not found, "\n".join(found)


def test_the_benchmarks_public_interface_is_importable():
    import mirror_sd.bench as bench
    assert bench_public() == set(bench.__all__) and "run_benchmark" in bench.__all__
    for name in bench.__all__:
        assert callable(getattr(bench, name))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_each_rule_catches_its_violation(tmp_path):
    root = _tree(tmp_path, {
        "mirror_sd/__init__.py": "",
        "mirror_sd/bench/__init__.py": "__all__ = ['run']\n",
        "mirror_sd/bench/harness.py": "def run(): pass\ndef _inner(): pass\n",
        "mirror_sd/engine/__init__.py": "",
        "mirror_sd/engine/a.py": "def f():\n    from mirror_sd.bench.harness import run\n",
        "mirror_sd/report/__init__.py": "",
        "mirror_sd/report/ok.py": "from mirror_sd.bench import run\n",
        "mirror_sd/report/bad.py": "from mirror_sd.bench.harness import run\n",
        "mirror_sd/models/__init__.py": "",
        "mirror_sd/models/loading.py": "def _src(): pass\n",
        "mirror_sd/models/inside.py": "from mirror_sd.models.loading import _src\n",  # same folder: fine
        "ui/__init__.py": "",
        "ui/page.py": "from mirror_sd.models.loading import _src\nfrom mirror_sd.models import loading\n"
                      "x = loading._src\n",
    })
    found = violations(root)
    assert any("mirror_sd/engine/a.py:2 imports mirror_sd.bench.harness.run (the benchmark is a leaf)" in v
               for v in found)
    assert any(v.startswith("mirror_sd/report/bad.py:1") and "public interface" in v for v in found)
    assert any(v.startswith("ui/page.py:1 imports the private mirror_sd.models.loading._src") for v in found)
    assert any(v.startswith("ui/page.py:3 reads the private mirror_sd.models.loading._src") for v in found)
    assert not any("report/ok.py" in v or "models/inside.py" in v for v in found)
    assert len(found) == 4
