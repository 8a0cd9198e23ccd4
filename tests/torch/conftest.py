"""Tests in this folder need torch; they are skipped cleanly where it is not installed."""

import pytest

pytest.importorskip("torch")
