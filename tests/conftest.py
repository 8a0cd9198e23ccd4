"""Hypothesis profiles: ``ci`` (derandomized, used when ``CI=true``) and ``dev`` (random).

Choose one explicitly with ``HYPOTHESIS_PROFILE=<name>``. Hypothesis prints the seed of a failing
random run (``@seed(...)``) and a reproduction blob, so a failure found in dev can be replayed.
"""

from __future__ import annotations

import os

try:
    from hypothesis import HealthCheck, settings
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
    settings.register_profile("dev", deadline=None, print_blob=True)
    default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))
