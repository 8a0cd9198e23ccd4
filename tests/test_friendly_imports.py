"""A missing optional dependency names the extra that installs it (run in a subprocess).

Each probe blocks a package with ``sys.modules[name] = None`` (as if it were not installed) and
imports the module that needs it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
sys.modules[{blocked!r}] = None
import topology
assert topology.Topology(8, tp=2).world_size == 8
try:
    import {module}
except ModuleNotFoundError as error:
    print(type(error).__name__, error.name, error, sep="|")
else:
    print("imported")
"""


def probe(blocked: str, module: str) -> list[str]:
    """Import ``module`` in a fresh interpreter where ``blocked`` is missing."""
    code = PROBE.format(blocked=blocked, module=module)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return out.stdout.strip().split("|")


@pytest.mark.parametrize(
    ("blocked", "module", "message"),
    [
        (
            "torch",
            "topology_torch",
            "topology_torch needs torch: pip install 'rank-topology[torch]'",
        ),
        (
            "hypothesis",
            "topology.strategies",
            "topology.strategies needs hypothesis: pip install 'rank-topology[hypothesis]'",
        ),
    ],
)
def test_missing_extra_is_named(blocked: str, module: str, message: str) -> None:
    """The import raises ModuleNotFoundError naming the package and the extra; topology works."""
    assert probe(blocked, module) == ["ModuleNotFoundError", blocked, message]


def test_core_imports_without_either_extra() -> None:
    """``import topology`` (and a Topology) works with torch and hypothesis both missing."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['hypothesis'] = None\n"
        "import topology; print(topology.Topology(16, tp=2, pp=4).group_of(5, 'pp'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    assert out.stdout.strip() == "(1, 5, 9, 13)"


def test_a_broken_install_keeps_its_own_error() -> None:
    """A missing module inside torch is not blamed on a missing extra."""
    code = (
        "import sys; sys.modules['torch._C'] = None\n"
        "try:\n    import topology_torch\n"
        "except ImportError as error:\n    print('extra' in str(error))\n"
        "else:\n    print('imported')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    assert out.stdout.strip() == "False"
