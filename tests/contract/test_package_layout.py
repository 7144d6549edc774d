"""The package's shape (issue 28): stage packages in the order of the data flow, imports
only downward or within a stage, no cycles, few modules at the top, no giant files, no two
modules with the same name, and no benchmark model in the product."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "gpufleet"
COLLECTION = REPO / "collections" / "ansible_collections" / "gpufleet" / "core"

#: The stages, lowest first; a module may import its own stage and any stage before it.
#: "base" is the top-level helpers every stage uses; "cli" is the command line on top.
LAYERS = ("base", "planning", "inputs", "provisioning", "node", "verify", "report", "cli")
BASE = {"errors", "results", "units"}
CLI = {"cli", "argtypes", "argsplit", "__main__", "commands"}
MAX_TOP_LEVEL_MODULES = 8
MAX_LINES = 800


def _layer(module: str) -> str:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    if head in BASE or head == "__init__":
        return "base"
    if head in CLI:
        return "cli"
    assert head in LAYERS, f"{module}: gpufleet.{head} is in no stage (LAYERS)"
    return head


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpufleet."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpufleet"):
            mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                found.add(sub if sub in MODULES else mod)
    return {m for m in found if m != "gpufleet"}


MODULES = _modules()


def test_top_level_holds_at_most_eight_modules() -> None:
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_stages(module: str) -> None:
    mine = LAYERS.index(_layer(module))
    upward = [m for m in sorted(_imports(MODULES[module])) if LAYERS.index(_layer(m)) > mine]
    assert not upward, f"{module} ({LAYERS[mine]}) imports a later stage: {upward}"


def test_no_import_cycles() -> None:
    graph = {m: {i for i in _imports(p) if i in MODULES} for m, p in MODULES.items()}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph[node]):
            # a package importing its own submodule (re-export) is not a cycle
            if not nxt.startswith(node + "."):
                visit(nxt, [*path, node])
        done.add(node)

    for m in sorted(graph):
        visit(m, [])


def test_no_source_file_over_800_lines() -> None:
    files = [*SRC.rglob("*.py"), *COLLECTION.rglob("*.py")]
    big = {
        str(f.relative_to(REPO)): n
        for f in files
        if (n := len(f.read_text().splitlines())) > MAX_LINES
    }
    assert not big, big


def test_no_two_modules_share_a_name() -> None:
    # An Ansible action plugin carries its module's name by Ansible's rule (action/X.py runs
    # modules/X.py), so the pair counts once.
    names = [p.stem for p in SRC.rglob("*.py") if p.stem != "__init__"]
    plugins = {p.stem for p in (COLLECTION / "plugins").rglob("*.py") if p.stem != "__init__"}
    twice = sorted(n for n, c in Counter([*names, *plugins]).items() if c > 1)
    assert not twice, twice


def test_benchmark_models_are_not_in_the_product() -> None:
    assert not (SRC / "scale.py").exists()
    assert not any("scale" in p.stem or p.stem.startswith("bench") for p in SRC.rglob("*.py"))
