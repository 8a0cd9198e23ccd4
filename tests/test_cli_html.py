"""``topology show --html``: a self-contained page whose highlighted group is the core's group.

Two parts. Without a browser: the page loads nothing from outside, parses as HTML, and the data
it embeds lists exactly the core's groups. In a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium): a real click on a rank highlights exactly the GPUs of
the core's group of the chosen kind (detailed view), or exactly the nodes that group spans
(aggregated view, 16,384 ranks). Under ``CI`` a missing browser is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topology import Cluster, Topology
from topology._cli.html import MAX_DETAILED_RANKS, html_page, page_data
from topology._cli.main import main
from topology.strategies import topologies

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

LAYOUTS = [
    (Topology(16, tp=2, pp=2, cp=2), Cluster(4, nvlink_domain=8)),
    (Topology(8, tp=2, pp=2, ep=2, rank_offset=3), Cluster(4)),
    (Topology(64, tp=4, pp=2, ep=4, etp=1), Cluster(8)),
]


def embedded(page: str) -> dict[str, Any]:
    """The JSON data block of ``page``."""
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


class _Tags(HTMLParser):
    """Collects start tags and their attributes; fails on unbalanced nesting of block tags."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes: list[tuple[str, str | None]] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes.extend(attrs)
        if tag not in {"meta", "input", "br", "option"}:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "option":
            return
        assert self.open and self.open[-1] == tag, (self.open, tag)
        self.open.pop()


@pytest.mark.parametrize(("topo", "cluster"), [*LAYOUTS, (Topology(1024, tp=8, pp=4), Cluster(8))])
def test_page_is_self_contained_and_well_formed(topo: Topology, cluster: Cluster) -> None:
    page = html_page(topo, cluster)
    tags = _Tags()
    tags.feed(page)
    tags.close()
    assert tags.open == []
    names = {name for name, _ in tags.attributes}
    assert not names & {"src", "href"}  # nothing is loaded from anywhere
    assert not re.search(r"https?://", page)


@settings(max_examples=25, deadline=None)
@given(topologies(max_world_size=64))
def test_embedded_groups_are_the_cores(topo: Topology) -> None:
    data = embedded(html_page(topo, Cluster(4)))
    assert data["kinds"] == list(topo.kinds)
    for kind in topo.kinds:
        by_index: dict[int, list[int]] = {}
        for position, index in enumerate(data["groups"][kind]):
            if index >= 0:
                by_index.setdefault(index, []).append(position + topo.rank_offset)
        assert [tuple(by_index[i]) for i in sorted(by_index)] == [
            tuple(sorted(group)) for group in topo.groups(kind)
        ]


def test_large_worlds_are_aggregated_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.html"
    assert (
        main(["show", "-w", "4096", "--tp", "8", "--pp", "4", "--html", str(path), "--json"]) == 0
    )
    data = embedded(path.read_text())
    assert data["world"] == 4096 and not data["detailed"] and "labels" not in data
    assert page_data(Topology(MAX_DETAILED_RANKS), Cluster(8))["detailed"]


def test_unwritable_path_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "-w", "8", "--html", "/nonexistent-dir/page.html"]) == 2
    assert "cannot write --html" in capsys.readouterr().err


# -- in a real browser --------------------------------------------------------------------------


def _browser_missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    try:
        import selenium  # noqa: F401  (only whether it is installed)
    except ImportError:
        return "selenium is not installed (extra 'test')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is missing (Debian packages chromium and chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test must run in CI: {missing}; scripts/setup.sh installs it")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--window-size=1400,1000",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        driver.set_page_load_timeout(600)  # a hang guard only
        try:
            yield driver
        finally:
            driver.quit()


def _open(driver: Any, topo: Topology, cluster: Cluster, folder: Path) -> None:
    path = folder / "page.html"
    path.write_text(html_page(topo, cluster), encoding="utf-8")
    driver.get(path.as_uri())


def _choose_kind(driver: Any, kind: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "kind")).select_by_value(kind)


def _click(driver: Any, selector: str) -> None:
    element = driver.find_element("css selector", selector)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()


def _highlighted(driver: Any, attribute: str) -> set[int]:
    cells = driver.find_elements("css selector", ".cell.hl")
    return {int(cell.get_attribute(attribute)) for cell in cells}


def test_clicking_a_rank_highlights_its_group(browser: Any, tmp_path: Path) -> None:
    for topo, cluster in LAYOUTS:
        _open(browser, topo, cluster, tmp_path)
        first, last = topo.rank_offset, topo.rank_offset + topo.world_size - 1
        for rank in (first, last, (first + last) // 2):
            for kind in ("tp", "dp", "pp", "tp-dp", *(["ep"] if topo.ep > 1 else [])):
                _choose_kind(browser, kind)
                _click(browser, f'.cell[data-rank="{rank}"]')
                assert _highlighted(browser, "data-rank") == set(topo.group_of(rank, kind))
                _click(browser, f'.cell[data-rank="{rank}"]')  # release the pin


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(topo=topologies(max_world_size=64), data=st.data())
def test_any_layout_highlights_the_cores_group(browser: Any, topo: Topology, data: Any) -> None:
    rank = data.draw(st.integers(topo.rank_offset, topo.rank_offset + topo.world_size - 1))
    kind = data.draw(st.sampled_from([k for k in topo.kinds if _has_group(topo, rank, k)]))
    with tempfile.TemporaryDirectory() as folder:
        _open(browser, topo, Cluster(4), Path(folder))
        _choose_kind(browser, kind)
        _click(browser, f'.cell[data-rank="{rank}"]')
        assert _highlighted(browser, "data-rank") == set(topo.group_of(rank, kind))


def _has_group(topo: Topology, rank: int, kind: str) -> bool:
    return any(rank in group for group in topo.groups(kind))


def test_aggregated_view_highlights_the_nodes_a_group_spans(browser: Any, tmp_path: Path) -> None:
    topo = Topology(16384, tp=8, pp=4, cp=2, ep=4)
    cluster = Cluster(8, nvlink_domain=72)
    _open(browser, topo, cluster, tmp_path)
    for node, kind in ((0, "dp"), (1000, "pp"), (2047, "cp"), (517, "ep")):
        _choose_kind(browser, kind)
        _click(browser, f'.cell[data-node="{node}"]')
        rank = node * 8  # the node's first rank stands for it
        expected = {r // 8 for r in topo.group_of(rank, kind)}
        assert _highlighted(browser, "data-node") == expected
        _click(browser, f'.cell[data-node="{node}"]')
