"""``show --svg`` and ``--html`` on an allocation draw its real hosts by name inside their
NVLink domains and racks or switches, whatever the reader (issue 31: hosts of unequal GPU
counts and ragged racks, refused before, draw as what they are), bounded on huge allocations."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_cli_allocation import DATA, invoke, run_json
from topology._cli.hostmap import MAX_DRAWN_HOSTS

SVG = "{http://www.w3.org/2000/svg}"

ALLOCATIONS = {
    "readme ragged NVL72": ("--allocation", str(DATA / "cli" / "ragged_nvl72.toml")),
    "nvl72 (2- and 4-GPU trays)": ("--allocation", str(DATA / "nvl72.toml")),
    "nvl72 json": ("--allocation", str(DATA / "nvl72.json")),
    "slurm tree": ("--slurm-topology", str(DATA / "tree.conf"), "--hosts", "dev[0-3,6-9,12-17]",
                   "--gpus-per-host", "4"),
    "slurm block": ("--slurm-topology", str(DATA / "cli" / "ragged_block.conf"), "--hosts",
                    "node[1-64]", "--gpus-per-host", "4"),
    "topograph": ("--topograph", str(DATA / "topograph.json"), "--gpus-per-host", "4"),
    "hostfile": ("--hostfile", str(DATA / "hostfile.txt"), "--gpus-per-host", "4"),
    "hosts": ("--hosts", "gpu[1-3]", "--gpus-per-host", "8"),
}  # fmt: skip
"""Every reader, on the repository's example allocations (the README's NVL72 first)."""


def _drawn(tmp_path: Path, argv: tuple[str, ...]) -> tuple[ET.Element, ET.Element, str]:
    """``show ARGV --svg --html``: both files parsed as XML, and the SVG's text."""
    svg, page = tmp_path / "a.svg", tmp_path / "a.html"
    code, _, err = invoke("show", *argv, "--svg", str(svg), "--html", str(page), "--json")
    assert code == 0, err
    text = svg.read_text(encoding="utf-8")
    return ET.fromstring(text), ET.parse(page).getroot(), text


def _expected(argv: tuple[str, ...]) -> tuple[list[str], set[str]]:
    """The drawn hosts (the first MAX_DRAWN_HOSTS of show --json's rank map) and their domains."""
    hosts = run_json("show", *argv)["allocation"]["rank_map"]["hosts"][:MAX_DRAWN_HOSTS]
    return [h["name"] for h in hosts], {d for h in hosts for d in h["domains"] if d is not None}


@pytest.mark.parametrize("name", list(ALLOCATIONS))
def test_every_reader_draws_hosts_and_domains(tmp_path: Path, name: str) -> None:
    """Each example allocation draws (issue 31: the README's NVL72 was refused): well-formed
    SVG and XHTML naming every drawn host and every domain of their tiers."""
    argv = ALLOCATIONS[name]
    svg, page, _ = _drawn(tmp_path, argv)
    assert svg.tag == f"{SVG}svg" and page.tag == "{http://www.w3.org/1999/xhtml}html"
    names, domains = _expected(argv)
    words = "".join(svg.itertext())
    for host in names:
        assert f"{host} · node rank" in words, host
    for domain in domains:
        assert f" {domain}" in words, domain
    assert "".join(page.itertext()).count(" · node rank ") == len(names)


def test_readme_nvl72_draws_racks_as_nvlink_domains(tmp_path: Path) -> None:
    """Golden: the README's allocation in the lexicographic order: 64 hosts, racks marked
    NVLink, leaf switches named, racks split by the string sort shown as separate boxes."""
    argv = (*ALLOCATIONS["readme ragged NVL72"], "--launcher-order", "lexicographic")
    svg, _, _ = _drawn(tmp_path, argv)
    words = list(svg.itertext())
    assert "rack rack1 (NVLink) · leaf leaf1" in words
    assert "node1 · node rank 0 · 4 GPUs" in words and "node10 · node rank 1 · 4 GPUs" in words


@settings(max_examples=15, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8, 72]), min_size=1, max_size=200),
    racks=st.integers(1, 5),
)
def test_generated_allocations_draw_bounded(
    tmp_path_factory: pytest.TempPathFactory, gpus: list[int], racks: int
) -> None:
    """Law: any generated allocation (mixed GPU counts, interleaved racks, up to 200 hosts)
    draws as well-formed SVG naming its first MAX_DRAWN_HOSTS hosts and counting the rest."""
    lines = ["[[tiers]]", 'name = "rack"', "nvlink = true", ""]
    for i, g in enumerate(gpus):
        lines += [
            "[[hosts]]",
            f'name = "h{i}"',
            f"gpus = {g}",
            f'domains = {{ rack = "k{i % racks}" }}',
            "",
        ]
    path = tmp_path_factory.mktemp("gen") / "alloc.toml"
    path.write_text("\n".join(lines))
    svg, _, text = _drawn(path.parent, ("--allocation", str(path)))
    words = "".join(svg.itertext())
    drawn = min(len(gpus), MAX_DRAWN_HOSTS)
    assert all(f"h{i} · node rank {i} ·" in words for i in range(drawn))
    assert f"h{drawn} · node rank" not in words
    if len(gpus) > MAX_DRAWN_HOSTS:
        assert f"… {len(gpus) - MAX_DRAWN_HOSTS} more hosts" in words
    assert text.count("<rect") < 80 * MAX_DRAWN_HOSTS
