"""The imports between the distribution's modules form a graph without cycles or private leaks.

The graph is read from the source files with ``ast`` (no module is imported, so the adapter is
checked without torch): every ``import`` statement anywhere in a module counts, at module level,
inside a function or under ``if TYPE_CHECKING:``, since a function-local import hides a cycle
without removing it. Relative imports are resolved; ``from package import name`` is an edge to
``package.name`` when that is a module of the distribution, else to ``package``. The implicit
import of a parent package (importing ``topology._layout.grid`` runs ``topology/__init__.py``) is
not an edge: it would make every module a cycle.

Privacy rule: a module is private to the package that holds its first underscore-named part
(``topology._megatron.kinds`` is private to ``topology``; ``topology.cost._plan`` is private to
``topology.cost``). Only modules inside that package may import it: ``topology._cli`` and
``topology.cost`` may use ``topology._megatron``, ``topology_torch`` may not (it uses the public
``topology`` API), and nothing outside ``topology.cost`` may use ``topology.cost._plan``. Tests
are not part of the graph: they may import private modules.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGES = ("topology", "topology_torch")

ALLOWED_CYCLES: list[tuple[str, ...]] = []
"""Known cycles still being removed, each as its modules in cycle order; must end empty."""

CORE_THIRD_PARTY = {"attrs"}
"""What the core may import besides the standard library and itself."""

CORE_OPTIONAL = {
    "topology.strategies": {"hypothesis"},  # extra "hypothesis"; `import topology` skips it
    "topology._cli.picture": {"rich"},  # extra "cli", imported inside render_rich only
    "topology._cli.plan": {"matplotlib"},  # extra "plot", imported inside the plot code only
    "topology._cli.completion": {"argcomplete"},  # extra "cli", imported when completing only
}
"""Core modules that use an optional extra (pyproject), and the packages that extra brings."""


def _modules() -> dict[str, Path]:
    """Every module of the distribution, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((SRC / package).rglob("*.py")):
            parts = list(path.relative_to(SRC).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every dotted name ``module`` imports (targets inside and outside the distribution)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                child = f"{source}.{alias.name}"
                yield child if child in MODULES else source


def _target(name: str) -> str | None:
    """The distribution module an imported name loads (its longest known prefix), else None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in MODULES:
            return candidate
    return None


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for module, path in MODULES.items():
        for name in _imported(module, path):
            target = _target(name)
            if target is not None and target != module:
                edges[module].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_one_cycle(edges, set(c), c[0]) for c in components]


def _one_cycle(edges: dict[str, set[str]], members: set[str], start: str) -> tuple[str, ...]:
    """A shortest cycle through ``start`` inside one component (breadth first)."""
    paths: dict[str, tuple[str, ...]] = {start: (start,)}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(edges[node] & members):
                if succ == start:
                    return paths[node]
                if succ not in paths:
                    paths[succ] = (*paths[node], succ)
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")  # pragma: no cover - members form a cycle


def _owner_of_private(module: str) -> str | None:
    """The package a module is private to (see the module docstring), None for public ones."""
    parts = module.split(".")
    for position, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:position])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_the_walk_sees_every_package_and_known_edges() -> None:
    """The walk finds both packages and edges of each import form (guards the walker itself)."""
    edges = _graph()
    assert "topology" in MODULES and "topology_torch" in MODULES
    assert "topology._megatron.topology" in edges["topology"]  # from ._megatron.topology import
    assert "topology_torch.ops" in edges["topology_torch"]  # from . import ops
    assert "topology" in edges["topology_torch._process_groups"]  # from topology import ...
    assert "topology_torch._default" in edges["topology_torch.compat.megatron"]  # from .. import


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, however deep or function-local they are."""
    cycles = [c for c in _cycles(_graph()) if c not in ALLOWED_CYCLES]
    shown = ["  " + " -> ".join((*c, c[0])) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(shown)


def test_the_allowance_list_is_empty() -> None:
    """Every known cycle has been removed: nothing is excused."""
    assert ALLOWED_CYCLES == []


def test_no_private_imports_across_packages() -> None:
    """A private module is imported only from inside the package it is private to."""
    leaks = []
    for module, targets in _graph().items():
        for target in sorted(targets):
            owner = _owner_of_private(target)
            if owner is not None and not _inside(module, owner):
                leaks.append(f"  {module} imports {target} (private to {owner})")
    assert not leaks, "private imports across packages:\n" + "\n".join(leaks)


def test_the_core_imports_only_the_standard_library_and_attrs() -> None:
    """No module of ``topology`` imports torch or another third-party package (extras aside)."""
    stray = []
    for module, path in MODULES.items():
        if not _inside(module, "topology"):
            continue
        allowed = CORE_THIRD_PARTY | CORE_OPTIONAL.get(module, set())
        for name in _imported(module, path):
            top = name.split(".")[0]
            if top == "topology" or top in sys.stdlib_module_names or top in allowed:
                continue
            stray.append(f"  {module} imports {name}")
    assert not stray, "the core imports beyond the standard library and attrs:\n" + "\n".join(stray)


def test_the_core_does_not_import_the_adapter() -> None:
    """Imports flow one way: ``topology_torch`` -> ``topology``, never back."""
    edges = _graph()
    back = [
        f"{m} -> {t}"
        for m, targets in edges.items()
        if _inside(m, "topology")
        for t in targets
        if _inside(t, "topology_torch")
    ]
    assert back == []


BASE = ("topology._errors", "topology._args", "topology._fields", "topology._datafile")
"""The foundation every layer may use: errors, argument checks, attrs fields, data files."""

LAYERS: dict[str, tuple[str, ...]] = {
    "topology._layout": (),
    "topology._megatron": ("topology._layout",),
    "topology._machine": (),
    "topology._architecture": (),
    "topology._engine": ("topology._architecture",),
    "topology._modules": ("topology._layout", "topology._megatron", "topology._machine"),
    "topology._transfer": (
        "topology._layout",
        "topology._megatron",
        "topology._machine",
        "topology._architecture",
    ),
    "topology._refit": (
        "topology._layout",
        "topology._megatron",
        "topology._machine",
        "topology._architecture",
        "topology._engine",
        "topology._transfer",
    ),
    "topology._reshape": ("topology._layout", "topology._megatron", "topology._machine"),
    "topology._preflight": (
        "topology._layout",
        "topology._megatron",
        "topology._machine",
        "topology._modules",
    ),
    "topology.cost": (
        "topology._layout",
        "topology._megatron",
        "topology._machine",
        "topology._architecture",
        "topology._preflight",
    ),
}
"""The core's layers, each with the layers below it that it may import (besides :data:`BASE`
and itself). The machine (hosts, tiers, allocations, ``Cluster``) stands apart from the layout
algebra and below everything that reasons about real hardware; modules, transfers and reshapes
never reach into the pre-launch checks. The model table (``_architecture``: a decoder's shapes and
published sizes, the presets) stands apart too, below the two layers that read it: the transfer's
weight lists and the cost model. The generation engines' layouts and sharding rules (``_engine``)
read only the model table (roles, head counts). ``_cli``, ``strategies`` and the package root sit on
top and may import any layer."""


def _layer(module: str) -> str | None:
    """The layer ``module`` belongs to (``"base"`` for the foundation), None above the layers."""
    if any(_inside(module, prefix) for prefix in BASE):
        return "base"
    return next((layer for layer in LAYERS if _inside(module, layer)), None)


def _may_import(layer: str, target: str) -> bool:
    return target in ("base", layer) or (layer != "base" and target in LAYERS[layer])


def test_the_layers_are_listed_below_one_another() -> None:
    """Each layer may import only layers listed before it (the table itself has no cycle)."""
    names = list(LAYERS)
    assert all(names.index(low) < names.index(layer) for layer in names for low in LAYERS[layer])


def test_the_core_layers_import_only_downwards() -> None:
    """No module imports a layer its own layer may not use: _layout never imports _megatron,
    _machine never imports the layout algebra, _modules, _transfer and _reshape never import
    _preflight, and nothing below the cost model imports it."""
    upward = sorted(
        (module, target)
        for module, targets in _graph().items()
        for target in targets
        if (layer := _layer(module)) is not None
        and (other := _layer(target)) is not None
        and not _may_import(layer, other)
    )
    assert upward == []


def test_every_core_module_below_the_top_has_a_layer() -> None:
    """Every private core package is in the layer table (a new one must be placed)."""
    top = ("topology", "topology.__main__", "topology.strategies")
    unplaced = [
        m
        for m in MODULES
        if _inside(m, "topology")
        and m not in top
        and not _inside(m, "topology._cli")
        and _layer(m) is None
    ]
    assert unplaced == []


def test_the_machine_layer_is_below_the_hardware_reasoning_layers() -> None:
    """The layer rule the machine move was for: these layers use the machine, never preflight."""
    for layer in ("topology._modules", "topology._transfer", "topology._reshape"):
        assert "topology._machine" in LAYERS[layer] and "topology._preflight" not in LAYERS[layer]
    assert LAYERS["topology._machine"] == ()


def test_the_model_table_is_below_its_two_readers() -> None:
    """One model table, in its own layer: it imports no other layer; transfer and cost read it."""
    assert LAYERS["topology._architecture"] == ()
    for layer in ("topology._transfer", "topology.cost"):
        assert "topology._architecture" in LAYERS[layer]
    edges = _graph()
    readers = {
        _layer(module)
        for module, targets in edges.items()
        if any(_inside(t, "topology._architecture") for t in targets)
    }
    assert {"topology._transfer", "topology.cost"} <= readers
