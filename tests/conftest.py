"""Hypothesis profiles: ``ci`` (derandomized, used when ``CI=true``), ``dev`` (random) and
``mutation`` (derandomized, few examples: ``scripts/mutation.sh`` runs the tests once per mutant).

Choose one explicitly with ``HYPOTHESIS_PROFILE=<name>``. Hypothesis prints the seed of a failing
random run (``@seed(...)``) and a reproduction blob, so a failure found in dev can be replayed.
"""

from __future__ import annotations

import os

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
        max_examples=25,
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
