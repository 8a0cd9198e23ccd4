"""Hostile allocation files (our TOML/JSON format): bounded work and clean errors (issue 22).

Host lists of all ``[[hosts]]`` tables share one bound (patched small); numbers of thousands of
digits and a tier named like the built-in ``node`` tier are TopologyErrors at reading time.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from topology import TopologyError
from topology._machine import hostlist
from topology._machine.readers.native_format import allocation_from_dict, read_allocation

HUGE = "9" * 5000


def _data(*names: str, tiers: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"gpus_per_host": 4, "tiers": tiers or [], "hosts": [{"names": n} for n in names]}


def test_the_host_lists_of_all_tables_share_one_bound() -> None:
    """Three tables of 3 hosts pass a bound of 8 for the whole file."""
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 8),
        pytest.raises(
            TopologyError, match=r"^allocation names more than 8 hosts in all its host lists"
        ),
    ):
        allocation_from_dict(_data("a[1-3]", "b[1-3]", "c[1-3]"))


def test_a_bracket_number_of_thousands_of_digits_is_refused() -> None:
    """names = "n[99...9]": a TopologyError naming the digit limit."""
    with pytest.raises(TopologyError, match=r"a number of 5000 digits"):
        allocation_from_dict(_data(f"n[{HUGE}]"))


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_gpu_count_of_thousands_of_digits_is_refused(tmp_path: Path, suffix: str) -> None:
    """gpus_per_host of 5,000 digits in JSON or TOML: a TopologyError, not int()'s limit."""
    path = tmp_path / f"alloc{suffix}"
    if suffix == ".json":
        path.write_text(f'{{"gpus_per_host": {HUGE}, "hosts": [{{"name": "a"}}]}}')
    else:
        path.write_text(f'gpus_per_host = {HUGE}\n[[hosts]]\nname = "a"\n')
    with pytest.raises(TopologyError):
        read_allocation(str(path))


def test_a_tier_named_node_is_refused_at_reading() -> None:
    """A tier called ``node`` would collide with the built-in host tier of every crossing table."""
    data = _data("a[1-2]", tiers=[{"name": "node", "nvlink": True}])
    with pytest.raises(TopologyError, match=r"the built-in tier of hosts.*rename the tier"):
        allocation_from_dict(data)


def test_host_names_with_huge_numbers_order_naturally() -> None:
    """Names holding 5,000-digit numbers sort under natural order without int()."""
    alloc = allocation_from_dict(_data(f"n{HUGE}", "n7"))
    assert [h.name for h in alloc.ordered("natural").hosts] == ["n7", f"n{HUGE}"]
