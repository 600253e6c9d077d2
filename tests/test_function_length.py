"""No function in mirror_sd/ or ui/ is longer than 60 lines (its `def` line to its last line,
docstring included), read from the source with `ast`: a long function is split into named
steps."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60


def long_functions(root: Path = ROOT, packages=("mirror_sd", "ui"), limit: int = LIMIT) -> list[str]:
    out = []
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_over_60_lines():
    found = long_functions()
    assert not found, "functions over 60 lines:\n" + "\n".join(found)


def test_a_long_function_is_found_nested_or_not(tmp_path):
    pkg = tmp_path / "mirror_sd"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (pkg / "a.py").write_text("def long():\n" + body + "\n\ndef short():\n    return 1\n")
    (pkg / "b.py").write_text("class C:\n    def method(self):\n" + body.replace("    ", "        ")
                              + "        def inner():\n" + body.replace("    ", "            "))
    found = long_functions(tmp_path, ("mirror_sd",))
    assert found == ["mirror_sd/a.py:1 long (61 lines)", "mirror_sd/b.py:2 method (122 lines)",
                     "mirror_sd/b.py:63 inner (61 lines)"]
    assert long_functions(tmp_path, ("mirror_sd",), limit=200) == []
