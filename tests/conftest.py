"""Hypothesis profiles: ``ci`` (derandomized, used when ``CI=true``), ``dev`` (random) and
``mutation`` (derandomized, few examples: ``scripts/mutation.sh`` runs the tests once per mutant).

Choose one explicitly with ``HYPOTHESIS_PROFILE=<name>``. Hypothesis prints the seed of a failing
random run (``@seed(...)``) and a reproduction blob, so a failure found in dev can be replayed.
"""

from __future__ import annotations

import json
import os
from typing import Any

try:
    from hypothesis import HealthCheck, Phase, settings
except ImportError:  # pragma: no cover - the test extra installs hypothesis
    pass
else:
    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    # No deadline and no too_slow health check in either profile: both measure wall-clock time,
    # and a verdict must not depend on how loaded the machine is.
    settings.register_profile(
        "dev",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "mutation",
        max_examples=10,
        derandomize=True,
        deadline=None,
        database=None,
        # A mutant is killed by the first failure: no shrinking, no hunt for further bugs.
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow],
    )
    default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


# -- the mutation run ----------------------------------------------------------------------------

# Where mutmut keeps what it measured; mutmut runs the tests from inside mutants/, so this is
# mutants/mutmut-stats.json of the repository.
MUTMUT_STATS = "mutmut-stats.json"


_durations: dict[str, float] = {}


def _measured_durations() -> dict[str, float]:
    """Seconds per test id from mutmut's stats, read once they exist (forked runs inherit them)."""
    if not _durations:
        try:
            with open(MUTMUT_STATS, encoding="utf-8") as stats:
                _durations.update(json.load(stats).get("duration_by_test", {}))
        except (OSError, ValueError):
            pass
    return _durations


# The files that take longest on 2 cores (``pytest --durations=0``, summed per file), slowest
# first. ``scripts/test.sh`` hands whole files to the two workers (``--dist loadfile``: a file's
# module-scoped gloo world starts once, not once per worker) in collection order, so these go
# first and the short files fill in around them instead of one long file running last alone.
SLOW_FILES = (
    "tests/test_budget_reference.py",
    "tests/torch/test_demo.py",
    "tests/torch/test_recovery.py",
    "tests/torch/test_megatron_install.py",
    "tests/torch/test_transfer_megatron.py",
    "tests/test_topology_laws.py",
    "tests/test_cli_width.py",
    "tests/test_gtp_megatron.py",
    "tests/test_cli_html.py",
    "tests/test_report_render.py",
    "tests/test_cli_place.py",
    "tests/test_fuzz_api.py",
    "tests/test_machine_errors.py",
    "tests/test_cli_json_schema.py",
    "tests/test_place_chains.py",
    "tests/torch/test_hyper_comm_grid_peer.py",
    "tests/torch/test_gpu_check.py",
)


def _slow_first(items: list[Any]) -> None:
    """Put the tests of :data:`SLOW_FILES` first, in that order (a stable sort: within a file
    and among the other files the collection order stays)."""
    rank = {name: index for index, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Slow files first (:func:`_slow_first`); under the ``mutation`` profile instead: fastest
    tests first, none above the profile's examples.

    mutmut stops at a mutant's first failing test, so running the tests it picked in order of
    their measured duration kills most mutants in the cheap tests. Tests that ask for more
    examples than the profile (``@settings(max_examples=60)``) are cut down to it, so a surviving
    mutant costs the same few examples in every test.
    """
    if os.environ.get("HYPOTHESIS_PROFILE") != "mutation":
        _slow_first(items)
        return
    durations = _measured_durations()
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
    cap = settings().max_examples
    for item in items:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is not None and chosen.max_examples > cap:
            test._hypothesis_internal_use_settings = settings(chosen, max_examples=cap)  # type: ignore[union-attr]
