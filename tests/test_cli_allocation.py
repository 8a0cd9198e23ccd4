"""The allocation flags of ``show`` and ``check``: every source format, every launcher order,
``--host-order``, the JSON they add, and bad input (exit 2, one line naming the bad value).

Expected host orders come from the orders' documented rules written here independently
(plain string sort; digit runs as numbers; Slurm's ``hostlist_sort``); expected domains come
from the data files themselves; crossing counts are recounted here from the host order and the
rack of each host, without the library.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_cli_json_schema import _assert_valid
from topology._cli.main import main

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "allocation"
RAGGED = DATA / "cli" / "ragged_nvl72.toml"
RAGGED_BLOCK = DATA / "cli" / "ragged_block.conf"
TREE = DATA / "tree.conf"

RACK_SIZES = {"rack1": 18, "rack2": 18, "rack3": 16, "rack4": 12}
"""The racks of ragged_nvl72.toml (and ragged_block.conf), in host-number order."""


def ragged_racks() -> dict[str, str]:
    """``node1 .. node64`` -> rack, as the data file writes them."""
    racks: dict[str, str] = {}
    number = 1
    for rack, size in RACK_SIZES.items():
        for _ in range(size):
            racks[f"node{number}"] = rack
            number += 1
    return racks


def invoke(*argv: str) -> tuple[int, str, str]:
    """Run ``topology ARGV`` in-process; return the exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str, codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """Run with ``--json``; require an exit code of ``codes`` and a document valid against the
    CLI schema."""
    code, out, err = invoke(*argv, "--json")
    assert code in codes, err
    data: dict[str, Any] = json.loads(out)
    _assert_valid(argv[0], data)
    return data


def assert_invalid(argv: tuple[str, ...], *fragments: str) -> None:
    """Exit 2, nothing on stdout, one stderr line holding every fragment."""
    code, out, err = invoke(*argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, err)
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def host_order(data: dict[str, Any]) -> list[str]:
    """The host order of ``show --json``'s rank map."""
    return [host["name"] for host in data["allocation"]["rank_map"]["hosts"]]


def tp_rack_crossings(order: list[str], racks: dict[str, str], gpus: int, tp: int) -> int:
    """tp groups (``tp`` consecutive ranks, tp fastest) whose hosts sit in two or more racks."""
    hosts_per_group = tp // gpus
    return sum(
        len({racks[h] for h in order[g : g + hosts_per_group]}) > 1
        for g in range(0, len(order), hosts_per_group)
    )


# -- launcher orders, written from their rules --------------------------------------------------


def natural(name: str) -> list[tuple[int, int, str]]:
    """Digit runs compare as numbers (then as written), text as text; digits before text."""
    return [
        (0, int(part), part) if part.isdigit() else (1, 0, part)
        for part in re.findall(r"\d+|\D+", name)
    ]


def slurm(name: str) -> tuple[Any, ...]:
    """Slurm's hostlist_sort: the name without its trailing number (naturally), then it."""
    head, number = re.fullmatch(r"(.*?)(\d*)", name).groups()  # type: ignore[union-attr]
    if not number:
        return (natural(head), 0, 0, 0, name)
    return (natural(head), 1, int(number), len(number), name)


ORDERS = {
    "listed": lambda names: list(names),
    "lexicographic": sorted,
    "natural": lambda names: sorted(names, key=natural),
    "slurm": lambda names: sorted(names, key=slurm),
}

MIXED = ["node8", "node9", "node10", "node11", "gpu2", "node1", "node007"]


@pytest.mark.parametrize("order", ORDERS)
def test_each_launcher_order_numbers_the_hosts_by_its_rule(order: str) -> None:
    """``--launcher-order`` sets the rank map's host order, as the order's rule sorts them."""
    hosts = ",".join(MIXED)
    data = run_json(
        "show", "-w", "28", "--hosts", hosts, "--gpus-per-host", "4", "--launcher-order", order
    )
    assert host_order(data) == ORDERS[order](MIXED)
    assert data["allocation"]["order"] == order
    assert data["cluster"] is None


def test_the_default_order_is_listed() -> None:
    """Without ``--launcher-order`` the hosts run in the order the source lists them."""
    data = run_json("show", "-w", "28", "--hosts", ",".join(MIXED), "--gpus-per-host", "4")
    assert host_order(data) == MIXED and data["allocation"]["order"] == "listed"


@given(
    st.lists(st.integers(1, 200), min_size=1, max_size=12, unique=True),
    st.sampled_from(list(ORDERS)),
)
def test_orders_of_numbered_hosts(numbers: list[int], order: str) -> None:
    """Any set of unpadded ``nodeN`` names: each order gives its rule's permutation."""
    names = [f"node{n}" for n in numbers]
    data = run_json(
        "show",
        "-w",
        str(2 * len(names)),
        "--hosts",
        ",".join(names),
        "--gpus-per-host",
        "2",
        "--launcher-order",
        order,
    )
    assert host_order(data) == ORDERS[order](names)


def test_host_order_file_overrides_the_launcher_order(tmp_path: Path) -> None:
    """``--host-order`` runs the hosts exactly in the file's order, whatever the launcher order."""
    wanted = ["node11", "gpu2", "node8", "node1", "node9", "node10", "node007"]
    path = tmp_path / "order.txt"
    path.write_text("# chosen by hand\n" + "\n".join(wanted) + "\n\n", encoding="utf-8")
    data = run_json(
        "show",
        "-w",
        "28",
        "--hosts",
        ",".join(MIXED),
        "--gpus-per-host",
        "4",
        "--launcher-order",
        "lexicographic",
        "--host-order",
        str(path),
    )
    assert host_order(data) == wanted and data["allocation"]["order"] == "host-order"


def test_host_order_may_name_only_the_hosts_the_job_needs(tmp_path: Path) -> None:
    """A host order shorter than the allocation is fine when its hosts hold the ranks."""
    path = tmp_path / "order.txt"
    path.write_text("node9\nnode8\n", encoding="utf-8")
    data = run_json(
        "show", "-w", "8", "--hosts", ",".join(MIXED), "--gpus-per-host", "4",
        "--host-order", str(path),
    )  # fmt: skip
    assert host_order(data) == ["node9", "node8"]


# -- each source format --------------------------------------------------------------------------


def test_allocation_toml_and_json_give_the_same_rank_map() -> None:
    """Our TOML and JSON files (same content) give one rank map: hosts listed, tiers, domains."""
    maps = []
    for name in ("nvl72.toml", "nvl72.json"):
        data = run_json("show", "-w", "136", "--tp", "4", "--allocation", str(DATA / name))
        maps.append(data["allocation"]["rank_map"])
    assert maps[0] == maps[1]
    rank_map = maps[0]
    assert [t["name"] for t in rank_map["tiers"]] == ["rack", "leaf"]
    assert rank_map["tiers"][0]["nvlink"] is True
    names = [h["name"] for h in rank_map["hosts"]]
    assert names == [f"node{i}" for i in range(1, 35)]  # 136 ranks: spare1 not needed
    assert rank_map["hosts"][18]["domains"] == ["rack2", "leaf2"]
    assert rank_map["hosts"][18]["first_rank"] == 72


def test_allocation_defaults_the_world_size_to_its_gpus() -> None:
    """No ``--world-size``: the layout takes every GPU (34 x 4 + 2 = 138)."""
    data = run_json("show", "--allocation", str(DATA / "nvl72.toml"))
    assert data["topology"]["world_size"] == 138
    last = data["allocation"]["rank_map"]["hosts"][-1]
    assert (last["name"], last["first_rank"], last["ranks"]) == ("spare1", 136, 2)


def test_hosts_select_and_order_hosts_of_an_allocation_file() -> None:
    """``--hosts`` with a file: only those hosts, in the order written."""
    data = run_json(
        "show", "-w", "16", "--allocation", str(DATA / "nvl72.toml"),
        "--hosts", "node[20,19],node2,node1",
    )  # fmt: skip
    assert host_order(data) == ["node20", "node19", "node2", "node1"]


def test_slurm_tree_topology() -> None:
    """topology.conf tree: each host under its leaf switch and the spine (tree.conf)."""
    data = run_json(
        "show", "-w", "36", "--slurm-topology", str(DATA / "tree.conf"),
        "--hosts", "dev[0-17]", "--gpus-per-host", "2",
    )  # fmt: skip
    hosts = data["allocation"]["rank_map"]["hosts"]
    assert [h["name"] for h in hosts] == [f"dev{i}" for i in range(18)]
    assert hosts[6]["domains"] == ["s1", "s3"] and hosts[17]["domains"] == ["s2", "s3"]
    assert data["cells"][13]["node"] == 6  # rank 13 on the 7th host (2 GPUs each)


def test_slurm_block_topology_ragged() -> None:
    """topology.conf block: hosts in their blocks, the 36-node aggregate above."""
    data = run_json(
        "show", "-w", "256", "--slurm-topology", str(RAGGED_BLOCK),
        "--hosts", "node[1-64]", "--gpus-per-host", "4",
    )  # fmt: skip
    hosts = data["allocation"]["rank_map"]["hosts"]
    racks = ragged_racks()
    assert [h["domains"][0] for h in hosts] == [racks[h["name"]] for h in hosts]
    assert {h["domains"][1] for h in hosts[:36]} != {h["domains"][1] for h in hosts[36:]}


def test_topograph() -> None:
    """Topograph JSON: NVLink domain label, then its network layers; missing ones unknown."""
    data = run_json(
        "show", "-w", "16", "--topograph", str(DATA / "topograph.json"), "--gpus-per-host", "4"
    )
    rank_map = data["allocation"]["rank_map"]
    assert [t["name"] for t in rank_map["tiers"]] == ["nvlink", "leaf", "spine"]
    assert [h["domains"] for h in rank_map["hosts"]] == [
        ["nvl-1", "leaf-a", "spine-a"],
        ["nvl-1", "leaf-a", "spine-a"],
        ["nvl-2", "leaf-b", "spine-a"],
        [None, "leaf-b", None],
    ]


def test_hostfile_slots_and_gpus_per_host() -> None:
    """Hostfile: slots=4 where written, --gpus-per-host for the other lines; listed order."""
    data = run_json(
        "show", "-w", "12", "--hostfile", str(DATA / "hostfile.txt"), "--gpus-per-host", "2"
    )
    hosts = data["allocation"]["rank_map"]["hosts"]
    assert [(h["name"], h["first_rank"], h["ranks"]) for h in hosts] == [
        ("node66", 0, 4),
        ("node7", 4, 4),
        ("node70", 8, 2),
        ("node71", 10, 2),
    ]
    assert data["allocation"]["rank_map"]["tiers"] == []


# -- show's text and crossings --------------------------------------------------------------------


def test_show_counts_tp_groups_crossing_racks_in_lexicographic_order() -> None:
    """show's crossings on the ragged racks equal a recount from the host order."""
    data = run_json(
        "show", "-w", "256", "--tp", "8", "--allocation", str(RAGGED),
        "--launcher-order", "lexicographic",
    )  # fmt: skip
    order = host_order(data)
    assert order == sorted(ragged_racks())
    found = data["allocation"]["crossings"]
    assert found["tiers"] == ["node", "rack", "leaf"]
    expected = tp_rack_crossings(order, ragged_racks(), 4, 8)
    assert expected > 0
    assert found["crossing"]["tp"]["rack"] == expected
    assert found["groups"]["tp"] == 32 and found["crossing"]["tp"]["node"] == 32


def test_show_text_has_a_section_per_tier() -> None:
    """Text: the host order, then per tier each domain's hosts and ranks and the crossings."""
    code, out, err = invoke(
        "show", "-w", "256", "--tp", "8", "--allocation", str(RAGGED),
        "--launcher-order", "natural", "--no-color",
    )  # fmt: skip
    assert code == 0, err
    assert "host order natural" in out and "node[1-64]" in out
    assert "tier rack (NVLink): 4 domains" in out and "tier leaf: 2 domains" in out
    rack4 = next(line for line in out.splitlines() if line.strip().startswith("rack4"))
    assert rack4.split()[1:] == ["12", "node[53-64]", "208-255"]
    crossing = next(line for line in out.splitlines() if "groups that cross rack" in line)
    assert "tp 0 of 32" in crossing


def test_show_large_world_with_allocation_prints_the_table_and_sections() -> None:
    """Above 256 ranks show prints its table, then the allocation sections."""
    code, out, err = invoke(
        "show", "--tp", "4", "--hosts", "n[1-80]", "--gpus-per-host", "4", "--no-color"
    )
    assert code == 0, err
    assert "allocation: 320 ranks on 80 hosts" in out and "kind" in out


# -- bad input ------------------------------------------------------------------------------------

HOSTS = ("--hosts", "node[1-4]", "--gpus-per-host", "4")


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (("show", "-w", "8", *HOSTS, "--launcher-order", "bogus"), ("bogus", "lexicographic")),
        (("show", "-w", "8", *HOSTS, "--launcher-order", "natrual"), ("natrual", "natural")),
        (("show", "-w", "8", "--hosts", "node[3-1]", "--gpus-per-host", "4"), ("node[3-1]",)),
        (("show", "-w", "8", "--hosts", "node[1-4]"), ("--gpus-per-host",)),
        (("show", "-w", "8", *HOSTS[:2], "--gpus-per-host", "0"), ("gpus_per_host", "got 0 (int)")),
        (("show", "-w", "8", "--launcher-order", "natural"), ("--launcher-order",)),
        (("show", "-w", "8", "--gpus-per-host", "4"), ("--gpus-per-host", "allocation")),
        (("show", "-w", "99", *HOSTS), ("99", "16 GPUs")),
        (("show", "-w", "8", *HOSTS, "--gpus-per-node", "4"), ("--gpus-per-node",)),
        (("check", "-w", "8", *HOSTS, "--nodes", "2"), ("--nodes",)),
        (
            ("show", "-w", "8", "--slurm-topology", str(TREE), "--gpus-per-host", "2"),
            ("--hosts",),
        ),
        (("show", "-w", "8", "--topograph", str(DATA / "topograph.json")), ("--gpus-per-host",)),
        (("show", "-w", "8", "--allocation", "no/such/file.toml"), ("no/such/file.toml",)),
        (
            ("show", "-w", "8", "--allocation", str(DATA / "nvl72.toml"), "--gpus-per-host", "4"),
            ("--gpus-per-host", "--allocation"),
        ),
        (
            ("show", "-w", "8", "--allocation", str(DATA / "nvl72.toml"), "--hosts", "node99"),
            ("node99",),
        ),
        (
            (
                "show", "-w", "8", "--allocation", str(DATA / "nvl72.toml"),
                "--hostfile", str(DATA / "hostfile.txt"),
            ),
            ("--allocation", "--hostfile"),
        ),
        (("show", "-w", "8", *HOSTS, "--slurm-plugin", "tree"), ("--slurm-plugin",)),
        (("show", "-w", "8", *HOSTS, "--host-order", "no/such/order"), ("no/such/order",)),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)  # fmt: skip
def test_bad_input_exits_2_naming_the_value(
    argv: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    """Each bad flag value is one line on stderr, exit 2, naming the value or the flag."""
    assert_invalid(argv, *fragments)


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("node1\nnode9\n", ("node9", "not in the allocation")),
        ("node1\nnode2\nnode1\n", ("node1", "line 3", "again")),
        ("node1 node2\n", ("line 1", "one host name per line")),
        ("node1 slots=4 slots=4\n", ("line 1", "one host name per line", "slots=N")),
        ("node1 slots=0\nnode2\n", ("line 1", "slots=0", "positive int")),
        ("node1 slots=3\nnode2\n", ("node1", "3 ranks", "fill it with 4", "slots=4")),
        ("node1\nnode1\nnode2\nnode1\n", ("node1", "line 4", "again")),
        ("# nothing\n", ("names no hosts",)),
        ("node1\n", ("1 hosts with 4 GPUs", "8 ranks")),
    ],
)
def test_bad_host_order_files(tmp_path: Path, content: str, fragments: tuple[str, ...]) -> None:
    """A host order naming an unknown host, a host twice, two words, bad or wrong slots,
    nothing, too few GPUs."""
    path = tmp_path / "order.txt"
    path.write_text(content, encoding="utf-8")
    assert_invalid(("show", "-w", "8", *HOSTS, "--host-order", str(path)), *fragments)


# -- check with an allocation (topology.check(topology, RankMap)) ---------------------------------


def test_check_with_allocation(tmp_path: Path) -> None:
    """check on an allocation: no --gpus-per-node needed, crossings in JSON equal a recount,
    and the order ``place`` chooses, given back as --host-order, has place's ``after``."""
    racks = ragged_racks()
    base = ("check", "-w", "256", "--tp", "8", "--allocation", str(RAGGED))
    data = run_json(*base, "--launcher-order", "lexicographic", codes=(0, 1))
    assert data["allocation"]["hosts"] == sorted(racks)
    expected = tp_rack_crossings(sorted(racks), racks, 4, 8)
    assert data["crossings"]["crossing"]["tp"]["rack"] == expected > 0
    placed = run_json("place", *base[1:], "--launcher-order", "lexicographic")
    path = tmp_path / "order.txt"
    path.write_text("\n".join(placed["hosts"]) + "\n", encoding="utf-8")
    again = run_json(*base, "--host-order", str(path), codes=(0, 1))
    assert again["allocation"]["hosts"] == placed["hosts"]
    for kind, per_tier in placed["crossings"].items():
        for tier, counts in per_tier.items():
            assert again["crossings"]["crossing"][kind][tier] == counts["after"], (kind, tier)
    code, out, err = invoke(*base, "--launcher-order", "lexicographic")
    assert code in (0, 1) and "rack" in out, err


def test_check_counts_separate_and_independent_kinds() -> None:
    """--separate/--independent reach the communicator budget: Topology(16, tp=2, pp=2) has 4
    dp groups (shared with dp-cp by default) and 8 tp groups, so 12 more communicators."""
    layout = ("check", "-w", "16", "--tp", "2", "--pp", "2", "--gpus-per-node", "8")
    plain = run_json(*layout)["communicators"]["strategies"]["all"]
    apart = run_json(*layout, "--separate", "dp", "--independent", "tp")
    assert apart["communicators"]["strategies"]["all"] == plain + 4 + 8
    assert "dp" not in apart["communicators"]["shared"]
    assert_invalid((*layout, "--separate", "nope"), "unknown kind 'nope'")
    low = run_json(*layout, "--nvls-limit", "2")
    assert "too-many-nvls-groups" in {f["code"] for f in low["findings"]}


def test_check_counts_kinds_with_their_own_pg_options() -> None:
    """--pg-options dp gives dp an options object of its own: it no longer shares dp-cp's 4
    communicators (one more per rank, 13 in a node); dp,dp-cp in one flag share one object."""
    layout = ("check", "-w", "16", "--tp", "2", "--pp", "2", "--gpus-per-node", "8")
    plain = run_json(*layout)["communicators"]
    apart = run_json(*layout, "--pg-options", "dp", "--nvls-limit", "11")
    assert apart["communicators"]["strategies"]["all"] == plain["strategies"]["all"] + 4
    assert apart["communicators"]["per_rank_max"] == plain["per_rank_max"] + 1
    nvls = next(f["message"] for f in apart["findings"] if f["code"] == "too-many-nvls-groups")
    assert "holds 13 communicators" in nvls
    together = run_json(*layout, "--pg-options", "dp,dp-cp,edp")["communicators"]
    assert together["strategies"]["all"] == plain["strategies"]["all"]
    twice = run_json(*layout, "--pg-options", "dp", "--pg-options", "dp_cp")["communicators"]
    assert twice["per_rank_max"] == plain["per_rank_max"] + 2
    assert_invalid((*layout, "--pg-options", "dp,"), "--pg-options 'dp,' has an empty kind")
    assert_invalid((*layout, "--pg-options", "dp", "--pg-options", "dp"), "names dp twice")
    assert_invalid((*layout, "--pg-options", "nope"), "unknown kind 'nope'")


def test_nvls_warning_names_only_the_given_limit() -> None:
    """--nvls-limit 11: the warning names 11 as given, not the default NVLS_LIMIT 128."""
    layout = ("check", "-w", "16", "--tp", "2", "--pp", "2", "--gpus-per-node", "8")
    data = run_json(*layout, "--independent", "tp", "--nvls-limit", "11")
    nvls = next(f["message"] for f in data["findings"] if f["code"] == "too-many-nvls-groups")
    assert "more than the 11 NVLink SHARP multicast groups of an NVSwitch domain" in nvls
    assert "(nvls_limit as given)" in nvls and "128" not in nvls and "NVLS_LIMIT" not in nvls
