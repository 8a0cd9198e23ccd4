"""Issue 25: a 16-rank gloo job loses a rank, agrees, applies the reshape and trains on."""

from __future__ import annotations

import json
import os
import tempfile

from tests.torch import recovery_run
from tests.torch.world import run_world


def test_the_survivors_train_on_as_a_fresh_dp3_run_would() -> None:
    """After rank 10 dies, losses and weights equal a fresh dp-3 run from the same weights."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        run_world(16, recovery_run.run, out, killed=(recovery_run.VICTIM,), store="tcp")
        times = json.loads(open(out).read())
    assert len(times["losses"]) == recovery_run.STEPS
