"""``show --svg`` and ``--html`` on an allocation draw its real hosts and NVLink domains, or
refuse with the reason (issue 22): hosts of unequal GPU counts and ragged racks are not drawn as
a uniform machine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_cli_allocation import assert_invalid, invoke

RACKS = """\
gpus_per_host = 4

[[tiers]]
name = "rack"
nvlink = true

[[hosts]]
names = "n[1-{first}]"
domains = {{ rack = "r1" }}

[[hosts]]
names = "n[{after}-{last}]"
domains = {{ rack = "r2" }}
"""


def _racks(tmp_path: Path, first: int, second: int) -> Path:
    """Two NVL72-style racks of ``first`` and ``second`` trays of 4 GPUs, in that order."""
    path = tmp_path / "racks.toml"
    path.write_text(RACKS.format(first=first, after=first + 1, last=first + second))
    return path


def _page_data(page: str) -> dict[str, object]:
    """The JSON the HTML page draws from (its ``data`` script element)."""
    match = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL)
    assert match is not None
    data: dict[str, object] = json.loads(match.group(1))
    return data


@pytest.mark.parametrize("flag", ["--svg", "--html"])
def test_hosts_of_unequal_gpus_are_refused(tmp_path: Path, flag: str) -> None:
    """Hosts of 2, 6, 4 and 4 GPUs are not drawn as 8-GPU nodes."""
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("a slots=2\nb slots=6\nc slots=4\nd slots=4\n")
    target = tmp_path / "out"
    argv = ("show", "--hostfile", str(hostfile), "-w", "16", flag, str(target))
    assert_invalid(argv, f"{flag} cannot draw this allocation", "2, 4, 6 GPUs")
    assert not target.exists()


@pytest.mark.parametrize("flag", ["--svg", "--html"])
def test_ragged_racks_are_refused(tmp_path: Path, flag: str) -> None:
    """Racks of 68 then 72 GPUs are not drawn as equal NVLink domains (a short last one is,
    as a cluster's last node may be short)."""
    argv = ("show", "--allocation", str(_racks(tmp_path, 17, 18)), flag, str(tmp_path / "out"))
    assert_invalid(argv, f"{flag} cannot draw this allocation", "rack NVLink domains hold 72, 68")


@pytest.mark.parametrize("second", [18, 17])
def test_equal_racks_are_drawn_as_nvlink_domains(tmp_path: Path, second: int) -> None:
    """Racks of 18 trays (the last may be short): 4-GPU hosts in 72-GPU NVLink domains."""
    target = tmp_path / "page.html"
    racks = str(_racks(tmp_path, 18, second))
    code, _, err = invoke("show", "--allocation", racks, "--html", str(target))
    assert code == 0, err
    data = _page_data(target.read_text())
    assert (data["gpus"], data["domain"]) == (4, 72)
    assert "4 GPUs per node, 72 per NVLink domain" in target.read_text()
