"""Hostile Topograph graphs: clean errors and orders for any input (issue 22, item 2).

Topograph names hosts one by one (no host lists), so its bound is the file size; the job's
``hosts`` selection is a host list with the usual bound (patched small here); numbers of
thousands of digits are TopologyErrors.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from topology import TopologyError
from topology._machine import hostlist
from topology._machine.readers.topograph import parse_topograph, read_topograph

HUGE = "9" * 5000


def _graph(*ids: str) -> dict[str, object]:
    return {"instances": [{"id": i, "network_layers": ["leaf"]} for i in ids]}


def test_the_hosts_selection_is_bounded() -> None:
    """hosts="n[1-9]" with the bound at 8: refused before listing."""
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 8),
        pytest.raises(TopologyError, match="has more than 8 hosts"),
    ):
        parse_topograph(_graph("n1"), gpus_per_host=4, hosts="n[1-9]")


def test_a_number_of_thousands_of_digits_in_the_file_is_refused(tmp_path: Path) -> None:
    """A 5,000-digit JSON number: a TopologyError, not int()'s limit."""
    path = tmp_path / "graph.json"
    path.write_text(f'{{"instances": [{{"id": "a", "extra": {HUGE}}}]}}')
    with pytest.raises(TopologyError):
        read_topograph(str(path), gpus_per_host=4)


def test_host_ids_with_huge_numbers_order_naturally() -> None:
    """IDs holding 5,000-digit numbers sort under natural and Slurm order without int()."""
    alloc = parse_topograph(_graph(f"n{HUGE}", "n7"), gpus_per_host=4)
    assert [h.name for h in alloc.ordered("natural").hosts] == ["n7", f"n{HUGE}"]
    assert [h.name for h in alloc.ordered("slurm").hosts] == ["n7", f"n{HUGE}"]
