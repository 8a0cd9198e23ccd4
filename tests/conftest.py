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


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Under the ``mutation`` profile: fastest tests first, none above the profile's examples.

    mutmut stops at a mutant's first failing test, so running the tests it picked in order of
    their measured duration kills most mutants in the cheap tests. Tests that ask for more
    examples than the profile (``@settings(max_examples=60)``) are cut down to it, so a surviving
    mutant costs the same few examples in every test.
    """
    if os.environ.get("HYPOTHESIS_PROFILE") != "mutation":
        return
    durations = _measured_durations()
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
    cap = settings().max_examples
    for item in items:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is not None and chosen.max_examples > cap:
            test._hypothesis_internal_use_settings = settings(chosen, max_examples=cap)  # type: ignore[union-attr]
