"""Packages of llamarl_core import only downward (docs/ARCHITECTURE.md, "Layers").

Every import counts, lazy ones inside functions included: a lazy import that closes a cycle is
still a cycle. A package may import only packages of a strictly lower layer.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "llamarl_core"

# Bottom to top. Packages in one layer may not import each other.
LAYERS: list[set[str]] = [
    {"config"},                                   # schema, choices, hardware specs
    {"models", "algorithms", "rewards", "wire"},  # pure tensors and text; the rollout wire type
    {"data", "generation", "sim", "envs"},        # data → rewards; engine → models; simulator; environments
    {"plan"},                                     # config → launch plan (calls the simulator)
    {"eval", "transport", "checkpoint", "sft"},   # shared evaluation; store, channels, weight sync; checkpoints; warm start
    {"observe"},                                  # metrics.jsonl and its sinks, progress, end reasons
    {"executors"},                                # role loops and the worker context
    {"runtime"},                                  # controller, worker entry, procs, live view
    {"bench"},                                    # benchmarks over runs
    {"report"},                                   # pictures and summaries of run directories
]
LAYER_OF = {p: i for i, layer in enumerate(LAYERS) for p in layer}


def imported_packages(path: Path):
    """(line, llamarl_core subpackage) for every import in a file, lazy ones included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "llamarl_core" and len(parts) > 1 and parts[1] in LAYER_OF:
                yield node.lineno, parts[1]
                break


def layering_violations(pkg_root: Path = PKG) -> list[str]:
    out = []
    for path in sorted(pkg_root.rglob("*.py")):
        rel = path.relative_to(pkg_root)
        if len(rel.parts) < 2:
            continue  # llamarl_core/__init__.py
        src = rel.parts[0]
        for line, dst in imported_packages(path):
            if dst != src and LAYER_OF[dst] >= LAYER_OF[src]:
                out.append(f"llamarl_core/{rel}:{line}: {src} (layer {LAYER_OF[src]}) imports "
                           f"{dst} (layer {LAYER_OF[dst]})")
    return out


def test_every_package_is_assigned_a_layer():
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYER_OF), f"unassigned: {packages - set(LAYER_OF)}, gone: {set(LAYER_OF) - packages}"


def test_packages_import_only_downward():
    assert layering_violations() == []


def test_an_upward_import_is_reported_with_file_and_line(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "bad.py").write_text("import os\n\ndef f():\n    from llamarl_core.runtime import worker\n")
    assert layering_violations(tmp_path) == [
        "llamarl_core/models/bad.py:4: models (layer 1) imports runtime (layer 7)"]


def test_cli_is_not_imported_by_the_core():
    hits = [f"{p}:{line}" for p in PKG.rglob("*.py")
            for line, text in enumerate(p.read_text().splitlines(), 1)
            if text.strip().startswith(("import llamarl_cli", "from llamarl_cli"))]
    assert hits == []


def module_name(path: Path, pkg_root: Path = PKG) -> str:
    rel = path.relative_to(pkg_root.parent).with_suffix("").parts
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def imported_modules(path: Path, modules: set[str], pkg_root: Path = PKG):
    """The llamarl_core modules a file imports, lazy imports and relative ones included:
    `from a.b import c` is module a.b.c when that is a module, else a.b."""
    name = module_name(path, pkg_root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from .x import y: x inside this package (.. one up)
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for a in node.names:
                found = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                if found in modules:
                    yield found
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)


def import_cycles(pkg_root: Path = PKG, within: str = "llamarl_core.runtime") -> list[list[str]]:
    """Every set of modules under `within` that import each other in a circle (the strongly
    connected components of the import graph with more than one module, or one importing itself)."""
    paths = {module_name(p, pkg_root): p for p in pkg_root.rglob("*.py")}
    graph = {m: {d for d in imported_modules(p, set(paths), pkg_root) if d.startswith(within + ".")}
             for m, p in paths.items() if m.startswith(within + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for d in graph[m]:
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            component = [stack.pop()]
            while component[-1] != m:
                component.append(stack.pop())
            if len(component) > 1 or m in graph[m]:
                cycles.append(sorted(component))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return cycles


def test_runtime_modules_import_each_other_in_no_circle():
    assert import_cycles() == []


def test_an_import_circle_is_found_even_through_a_lazy_import(tmp_path):
    root = tmp_path / "llamarl_core"
    (root / "runtime").mkdir(parents=True)
    for name in ("__init__", "runtime/__init__", "runtime/c"):
        (root / f"{name}.py").write_text("")
    (root / "runtime" / "a.py").write_text("from llamarl_core.runtime import b, c\n")
    (root / "runtime" / "b.py").write_text("def f():\n    from .a import x\n")
    assert import_cycles(root) == [["llamarl_core.runtime.a", "llamarl_core.runtime.b"]]
