"""The API reference builds from one command, documents every public name, and has no broken link.

``bash scripts/docs.sh DIR`` runs pdoc on the public modules and then fails on any link to a page
or anchor the site does not have (pdoc itself does not check them).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "docs.sh"
MODULES = [
    "topology",
    "topology.cost",
    "topology.strategies",
    "topology_torch",
    "topology_torch.layers",
    "topology_torch.ops",
    "topology_torch.recovery",
    "topology_torch.transfer",
    "topology_torch.compat.megatron",
    "topology_torch.compat.ezpz",
    "topology_torch.compat.ml",
]


def have_pdoc() -> bool:
    """Whether pdoc is importable here (setup installs it; CI must have it)."""
    try:
        importlib.import_module("pdoc")
    except ImportError:
        return False
    return True


if os.environ.get("CI") and not have_pdoc():  # pragma: no cover - a broken CI environment
    raise AssertionError("pdoc is not installed in CI: scripts/setup.sh installs it")
if not have_pdoc():  # pragma: no cover - local environments without the docs tools
    pytest.skip("pdoc is not installed (scripts/setup.sh installs it)", allow_module_level=True)
pytest.importorskip("torch", reason="topology_torch's pages need torch")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run scripts/docs.sh with this interpreter."""
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def build(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The site, built once for this module, and how the build ended."""
    out = tmp_path_factory.mktemp("docs") / "site"
    return out, run(str(out))


@pytest.fixture
def site(build: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    """The built site (its pages exist even when the link check failed)."""
    out, done = build
    assert (out / "index.html").is_file(), done.stderr
    return out


def page(site: Path, module: str) -> Path:
    """The page pdoc writes for ``module``."""
    return site.joinpath(*module.split(".")).with_suffix(".html")


def test_build_succeeds_with_no_broken_link(
    build: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The one command builds the site and its link check finds nothing."""
    out, done = build
    assert done.returncode == 0, done.stderr
    assert (out / "index.html").is_file()
    assert "every link resolves" in done.stdout


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_has_an_anchor(site: Path, module: str) -> None:
    """Each name in a module's __all__ has an anchor on its page (a submodule: its own page)."""
    text = page(site, module).read_text(encoding="utf-8")
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    mod = importlib.import_module(module)
    missing = [
        name
        for name in mod.__all__
        if name not in ids and not page(site, f"{module}.{name}").is_file()
    ]
    assert missing == []


def test_no_private_module_has_a_page(site: Path) -> None:
    """Only public modules are documented: no page path has a part starting with '_'."""
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert [p for p in pages if any(s.startswith("_") for s in p.split("/"))] == []
    assert pages == {
        "index.html",
        *(f"{m.replace('.', '/')}.html" for m in MODULES),
    }


def test_link_check_fails_on_a_broken_link(site: Path, tmp_path: Path) -> None:
    """A link to a missing anchor or page makes the check exit 1 and name the link."""
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    target = copy / "topology.html"
    text = target.read_text(encoding="utf-8")
    text += '<a href="#NoSuchName">x</a><a href="topology/nowhere.html">y</a>'
    target.write_text(text, encoding="utf-8")
    done = run("--check", str(copy))
    assert done.returncode == 1
    assert "'#NoSuchName' names no anchor of topology.html" in done.stderr
    assert "'topology/nowhere.html' names no page of the site" in done.stderr
