"""Tests in this folder need torch; they are skipped cleanly where it is not installed."""

import pytest

pytest.importorskip("torch")

collect_ignore = ["resharding_oracle.py"]
"""Scripts run in a subprocess with another megatron-core on ``PYTHONPATH``, not test modules:
``--doctest-modules`` would import them with the installed megatron-core, which lacks what
they import."""
