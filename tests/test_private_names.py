"""No module uses another module's private names: the core, the adapter, benchmarks and scripts.

The sources are read with ``ast`` (nothing is imported, so the adapter and the benchmarks are
checked without torch). A private name has a leading underscore and is no dunder. Three rules:

(a) no ``from x import _y`` where ``x`` is a module of ours and ``x._y`` is no module (whether a
    private module may be imported is the import-graph test's business, and rule (c)'s);
(b) no ``obj._y`` where ``_y`` is a private attribute, method or property that a class of
    another module of ours defines (or one of its methods sets on ``self``) and the current
    module does not define; ``self._y``, ``cls._y`` and ``super()._y`` are the object's own.
    ``module._y`` of another module of ours is always a use. Attributes reached from a
    third-party module, or from a name imported from one (``torch._C``,
    ``dist.distributed_c10d._world``), are out of scope;
(c) benchmarks and scripts import no private module of ours (a dotted name with an underscore
    part): they use the public API (``topology``, ``topology.cost``, ``topology_torch``, its
    ``compat`` façades) and the tests' helpers. Their own helper modules
    (``benchmarks/_timing.py``) are theirs to use.

Inside a private module a name without an underscore is how sibling modules share it. Tests are
exempt: they may reach into anything (and hold the oracles benchmarks compare against).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("topology", "topology_torch")
OURS = (*PACKAGES, "tests")
"""The top-level names whose modules are ours wherever they are imported from."""

FOLDERS = ("src", "benchmarks", "scripts", "scripts/peers")
"""The checked folders; a module of one is imported by its name relative to the folder, and
the modules of its own folder are importable from it by that name (``from _timing import``)."""

ALLOWED: set[str] = set()
"""Known uses still being removed, each as its message without the line number."""


class Source(NamedTuple):
    """One module: its dotted name as imported, its folder, its file and its syntax tree."""

    name: str
    folder: str
    path: str
    tree: ast.Module
    is_package: bool = False


def _load(folder: str, path: Path, *, parse: bool = True) -> Source:
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    if folder == "tests":
        parts.insert(0, "tests")
    tree = ast.parse(path.read_text(), str(path)) if parse else ast.Module([], [])
    return Source(".".join(parts), folder, str(path.relative_to(ROOT)), tree, is_package)


def _sources() -> list[Source]:
    """Every checked module, and the tests' modules by name only (they are not checked)."""
    found = [
        _load("src", path)
        for package in PACKAGES
        for path in sorted((ROOT / "src" / package).rglob("*.py"))
    ]
    for folder in FOLDERS[1:]:
        found += [_load(folder, path) for path in sorted((ROOT / folder).glob("*.py"))]
    tests = sorted((ROOT / "tests").rglob("*.py"))
    return found + [_load("tests", path, parse=False) for path in tests]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own(node: ast.expr) -> bool:
    """True for ``self``, ``cls`` and ``super()``: the object's own attributes."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "super"


def _bound(statement: ast.stmt) -> set[str]:
    """The names a ``def``, ``class`` or assignment binds."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _definitions(tree: ast.Module) -> tuple[set[str], set[str]]:
    """``(module-level private names, private attribute names)`` of a module; the second holds
    the names bound in class bodies, assigned on ``self`` / ``cls`` or set by
    ``setattr(obj, "_y", ...)`` / ``object.__setattr__(obj, "_y", ...)``."""
    top: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        statement = pending.pop()
        top |= _bound(statement)
        if isinstance(statement, ast.If | ast.Try):
            pending += [*statement.body, *statement.orelse, *getattr(statement, "finalbody", [])]
    attributes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                attributes |= _bound(statement)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if _own(node.value):
                attributes.add(node.attr)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            label = node.args[1]
            if name in ("setattr", "__setattr__") and isinstance(label, ast.Constant):
                attributes.add(str(label.value))
    return {n for n in top if _private(n)}, {n for n in attributes if _private(n)}


class Checker:
    """The three rules over a set of sources (the real tree, or a made-up one in the guard)."""

    def __init__(self, sources: Iterable[Source]) -> None:
        self.sources = list(sources)
        self.by_folder: dict[str, dict[str, Source]] = {}
        for source in self.sources:
            self.by_folder.setdefault(source.folder, {})[source.name] = source
        self.definitions = {s.path: _definitions(s.tree) for s in self.sources}
        self.attributes: dict[str, set[str]] = {}
        """Each private attribute name, with the modules (paths) whose classes define it."""
        for source in self.sources:
            for name in self.definitions[source.path][1]:
                self.attributes.setdefault(name, set()).add(source.path)

    def _module(self, importer: Source, name: str) -> Source | None:
        """The module of ours called ``name`` as ``importer`` sees it, else None."""
        for folder in dict.fromkeys(("src", "tests", importer.folder)):
            found = self.by_folder.get(folder, {}).get(name)
            if found is not None:
                return found
        return None

    def _ours(self, importer: Source, name: str) -> bool:
        top = name.split(".")[0]
        return top in OURS or top in self.by_folder.get(importer.folder, {})

    def _imports(self, source: Source) -> Iterator[tuple[int, str, str | None, str | None]]:
        """``(line, module, name, alias)`` per imported name: ``import a.b as c`` gives
        ``(line, "a.b", None, "c")``, ``from a import b as c`` gives ``(line, "a", "b", "c")``;
        relative imports are resolved."""
        package = source.name if source.is_package else source.name.rpartition(".")[0]
        for node in ast.walk(source.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name, None, alias.asname
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    module = f"{base}.{module}" if module else base
                for alias in node.names:
                    yield node.lineno, module, alias.name, alias.asname

    def _aliases(self, source: Source) -> dict[str, tuple[str, bool]]:
        """Local names bound to modules by imports: ``name -> (module, it is ours)``; a name
        imported from a third-party module counts as a third-party module whatever it is."""
        found: dict[str, tuple[str, bool]] = {}
        for _, module, name, alias in self._imports(source):
            if name is None:
                target = module if alias else module.split(".")[0]
                found[alias or target] = (target, self._ours(source, target))
            elif not self._ours(source, module):
                found[alias or name] = (f"{module}.{name}", False)
            elif self._module(source, f"{module}.{name}") is not None:
                found[alias or name] = (f"{module}.{name}", True)
        return found

    def private_name_imports(self, source: Source) -> Iterator[tuple[int, str]]:
        """Rule (a)."""
        for line, module, name, _ in self._imports(source):
            if name is None or not _private(name) or not self._ours(source, module):
                continue
            if self._module(source, f"{module}.{name}") is None:
                yield line, f"imports private name {module}.{name}"

    def private_attributes(self, source: Source) -> Iterator[tuple[int, str]]:
        """Rule (b)."""
        own = set().union(*self.definitions[source.path])
        aliases = self._aliases(source)
        for node in ast.walk(source.tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            if _own(node.value):
                continue
            base, chain = node.value, []
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                target, ours = aliases[base.id]
                if not ours:
                    continue  # reached from a third-party module: out of scope
                while chain and self._module(source, f"{target}.{chain[0]}") is not None:
                    target = f"{target}.{chain.pop(0)}"
                if not chain:
                    if target != source.name:
                        yield node.lineno, f"uses {target}.{node.attr}"
                    continue
            owners = self.attributes.get(node.attr, set()) - {source.path}
            if owners and node.attr not in own:
                yield node.lineno, f"uses {node.attr} of {', '.join(sorted(owners))}"

    def private_modules(self, source: Source) -> Iterator[tuple[int, str]]:
        """Rule (c): the modules of ours with an underscore part that ``source`` imports."""
        for line, module, name, _ in self._imports(source):
            if module.split(".")[0] not in OURS:
                continue
            full = module if name is None else f"{module}.{name}"
            target = full if self._module(source, full) is not None else module
            if any(_private(part) for part in target.split(".")):
                yield line, f"imports private module {target}"

    def violations(self) -> list[str]:
        """Every use the rules forbid, as ``path: message (line n)``, less :data:`ALLOWED`."""
        found = set()
        for source in self.sources:
            if source.folder == "tests":
                continue
            uses = [*self.private_name_imports(source), *self.private_attributes(source)]
            if source.folder != "src":
                uses += self.private_modules(source)
            found |= {(f"{source.path}: {message}", line) for line, message in uses}
        return [f"{text} (line {line})" for text, line in sorted(found) if text not in ALLOWED]


SOURCES = _sources()
CHECKER = Checker(SOURCES)


def _made_up(folder: str, name: str, text: str) -> Source:
    path = f"{folder}/{name.replace('.', '/')}.py"
    return Source(name, folder, path, ast.parse(text))


def test_the_walk_sees_every_folder() -> None:
    """Every checked file is read, and definitions of each form are found (guards the walk)."""
    counted = {folder: sum(s.folder == folder for s in SOURCES) for folder in FOLDERS}
    assert counted["src"] == sum(1 for p in PACKAGES for _ in (ROOT / "src" / p).rglob("*.py"))
    assert counted["benchmarks"] == len(list((ROOT / "benchmarks").glob("*.py"))) > 10
    assert counted["scripts"] >= 3 and counted["scripts/peers"] >= 3
    grid = "src/topology/_layout/grid.py"
    assert grid in CHECKER.attributes["_strides"]  # an attrs field of Grid
    assert "src/topology/_megatron/topology.py" in CHECKER.attributes["_spec"]  # a method
    assert "src/topology_torch/_process_groups.py" in CHECKER.attributes["_destroyed"]  # self._y =
    assert "_LEVEL" in CHECKER.definitions["src/topology/_megatron/kinds.py"][0]  # module level
    assert CHECKER._module(SOURCES[0], "tests.torch.world") is not None  # the tests, by name


def test_the_rules_catch_each_form_of_use() -> None:
    """On made-up modules: each rule reports what it should and nothing else."""
    owner = _made_up("src", "topology.owner", "class A:\n    def _m(self):\n        self._n = 1\n")
    user = _made_up(
        "src",
        "topology.user",
        "import torch\n"
        "import topology.owner as o\n"
        "from topology.owner import _hidden\n"
        "from torch import distributed as dist\n"
        "def f(a):\n"
        "    a._m(); a._n; torch._C; dist.c10d._m; o._x\n"
        "class B:\n"
        "    def g(self):\n"
        "        self._m(); super()._n; type(self)._q\n",
    )
    bench = _made_up(
        "benchmarks",
        "bench_x",
        "import topology._layout.grid\nfrom _timing import t\nfrom topology import Grid\n",
    )
    timing = _made_up("benchmarks", "_timing", "def t(): ...\n")
    assert Checker([owner, user, bench, timing]).violations() == [
        "benchmarks/bench_x.py: imports private module topology._layout.grid (line 1)",
        "src/topology/user.py: imports private name topology.owner._hidden (line 3)",
        "src/topology/user.py: uses _m of src/topology/owner.py (line 6)",
        "src/topology/user.py: uses _n of src/topology/owner.py (line 6)",
        "src/topology/user.py: uses topology.owner._x (line 6)",
    ]


def test_no_module_imports_a_private_name_of_another() -> None:
    """No ``from x import _y`` of ours outside the tests."""
    found = [v for v in CHECKER.violations() if "imports private name" in v]
    assert not found, "private names imported:\n" + "\n".join(found)


def test_no_module_uses_a_private_attribute_of_another() -> None:
    """No ``obj._y`` of a private attribute another module of ours defines."""
    found = [v for v in CHECKER.violations() if ": uses " in v]
    assert not found, "private attributes used across modules:\n" + "\n".join(found)


def test_benchmarks_and_scripts_import_only_public_modules() -> None:
    """Benchmarks and scripts use the public API: no module of ours with an underscore part."""
    found = [v for v in CHECKER.violations() if "imports private module" in v]
    assert not found, "private modules imported by benchmarks and scripts:\n" + "\n".join(found)


def test_every_allowance_is_still_needed() -> None:
    """Each :data:`ALLOWED` entry names a use that still exists (a stale one must go)."""
    uses = {
        f"{s.path}: {message}"
        for s in SOURCES
        if s.folder not in ("src", "tests")
        for _, message in CHECKER.private_modules(s)
    }
    assert uses >= ALLOWED
