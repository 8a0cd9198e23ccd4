"""``topology place``: the chosen host order, crossings before and after, the hostfile it
writes, its JSON contract, and a round trip through ``show --host-order``.

Crossing counts are recounted here from a host order and each host's rack (read off the data
file's ranges), without the library; the round trip compares two commands' independent paths
(place scores candidates itself; show maps ranks through ``RankMap`` and ``crossings``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli_allocation import (
    DATA,
    ORDERS,
    RAGGED,
    assert_invalid,
    invoke,
    ragged_racks,
    run_json,
    tp_rack_crossings,
)

LAYOUT = ("-w", "256", "--tp", "8")
HOSTS = ("--hosts", "n[1-4]", "--gpus-per-host", "4")


def test_ragged_nvl72_place_beats_torchrun_order() -> None:
    """Racks of 18, 18, 16, 12 hosts named node1..node64: torchrun's string sort puts tp groups
    across racks; place keeps every tp group in one rack, and says so before -> after."""
    racks = ragged_racks()
    data = run_json(
        "place", *LAYOUT, "--allocation", str(RAGGED), "--launcher-order", "lexicographic"
    )
    before = tp_rack_crossings(sorted(racks), racks, 4, 8)
    after = tp_rack_crossings(data["hosts"], racks, 4, 8)
    assert before > 0 and after == 0
    assert data["crossings"]["tp"]["rack"] == {"before": before, "after": after}
    assert data["improved"] is True and data["baseline"] == "lexicographic"
    assert sorted(data["hosts"]) == sorted(racks) and data["unused"] == []
    assert data["tiers"] == ["node", "rack", "leaf"] and data["groups"]["tp"] == 32
    assert data["layout"].startswith("tp8") and data["topology"]["world_size"] == 256


@pytest.mark.parametrize("order", ORDERS)
def test_place_is_never_worse_than_the_launcher(order: str) -> None:
    """Whatever the launcher order, no kind's rack crossings exceed the launcher's when tp,
    the first kind placement serves, gets none; the before column is that order's recount."""
    racks = ragged_racks()
    data = run_json(
        "place", "-w", "256", "--tp", "8", "--ep", "4", "--allocation", str(RAGGED),
        "--launcher-order", order,
    )  # fmt: skip
    recount = tp_rack_crossings(ORDERS[order](list(racks)), racks, 4, 8)
    assert data["crossings"]["tp"]["rack"]["before"] == recount
    assert data["crossings"]["tp"]["rack"]["after"] == 0
    assert tp_rack_crossings(data["hosts"], racks, 4, 8) == 0


@pytest.mark.parametrize("form", ["hostfile", "slurm"])
def test_round_trip_through_show_host_order(tmp_path: Path, form: str) -> None:
    """The written hostfile is the JSON's hosts and slots in the --format asked for (slurm: one
    line per task); given to show as --host-order it has exactly place's ``after`` crossings,
    every kind and tier."""
    out = tmp_path / "hosts.txt"
    argv = ("-w", "256", "--tp", "8", "--ep", "4", "--allocation", str(RAGGED))
    placed = run_json(
        "place", *argv, "--launcher-order", "lexicographic", "--write-hostfile", str(out),
        "--format", form,
    )  # fmt: skip
    assert placed["hostfile"] == {"path": str(out), "format": form}
    pairs = list(zip(placed["hosts"], placed["slots"], strict=True))
    expected = (
        [f"{host} slots={slots}" for host, slots in pairs]
        if form == "hostfile"
        else [host for host, slots in pairs for _ in range(slots)]
    )
    assert out.read_text(encoding="utf-8").splitlines() == expected
    assert sum(placed["slots"]) == 256
    shown = run_json("show", *argv, "--host-order", str(out))
    assert [h["name"] for h in shown["allocation"]["rank_map"]["hosts"]] == placed["hosts"]
    crossing = shown["allocation"]["crossings"]["crossing"]
    assert set(crossing) == set(placed["crossings"])
    for kind, per_tier in placed["crossings"].items():
        for tier, counts in per_tier.items():
            assert crossing[kind][tier] == counts["after"], (kind, tier)
    before = run_json("show", *argv, "--launcher-order", "lexicographic")
    for kind, per_tier in placed["crossings"].items():
        for tier, counts in per_tier.items():
            assert before["allocation"]["crossings"]["crossing"][kind][tier] == counts["before"]


def test_host_order_is_the_baseline(tmp_path: Path) -> None:
    """With --host-order, before counts that order; placing a placed order changes nothing."""
    out = tmp_path / "hosts.txt"
    argv = ("place", *LAYOUT, "--allocation", str(RAGGED))
    first = run_json(*argv, "--launcher-order", "lexicographic", "--write-hostfile", str(out))
    again = run_json(*argv, "--host-order", str(out))
    assert again["baseline"] == "host-order"
    assert again["improved"] is False and again["method"] == "host-order"
    assert again["hosts"] == first["hosts"]
    for kind, per_tier in again["crossings"].items():
        for tier, counts in per_tier.items():
            assert counts["before"] == counts["after"] == first["crossings"][kind][tier]["after"]


def test_text_output() -> None:
    """Text: the method, the order as a host list and node rank -> host, the before -> after
    table per kind and tier, the unused hosts."""
    code, out, err = invoke(
        "place", "-w", "128", "--tp", "8", "--allocation", str(DATA / "nvl72.toml"),
        "--hosts", "node[1-34]", "--launcher-order", "lexicographic",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert any(
        line.startswith("method: ") and "better than the lexicographic" in line for line in lines
    )
    assert "node rank -> host:" in lines
    start = lines.index("node rank -> host:")
    # 32 hosts: the first and last 8 node ranks, and a line for the 16 between.
    mapping = [line.split() for line in lines[start + 1 : start + 18]]
    first, more, last = mapping[:8], mapping[8], mapping[9:]
    assert [int(node) for node, _ in first + last] == [*range(8), *range(24, 32)]
    assert more[:2] == ["…", "16"] and "--write-hostfile" in lines[start + 9]
    header = next(line for line in lines if line.strip().startswith("kind"))
    assert header.split() == ["kind", "groups", "node", "rack", "leaf"]
    tp = next(line.split() for line in lines if line.strip().startswith("tp "))
    assert tp[:2] == ["tp", "16"] and tp[-3:] == ["2", "->", "0"]
    assert lines[-1].startswith("unused hosts (2): ")


@pytest.mark.parametrize(
    "source",
    [
        ("--hostfile", str(DATA / "hostfile.txt"), "--gpus-per-host", "4"),
        ("--topograph", str(DATA / "topograph.json"), "--gpus-per-host", "4"),
        (
            "--slurm-topology",
            str(DATA / "tree.conf"),
            "--hosts",
            "dev[0-15]",
            "--gpus-per-host",
            "1",
        ),
        ("--hosts", "node[1-16]", "--gpus-per-host", "1"),
        ("--allocation", str(DATA / "nvl72.json"), "--hosts", "node[1-4]"),
    ],
    ids=lambda source: source[0],
)
def test_every_source_places(source: tuple[str, ...]) -> None:
    """Each source format gives a valid document holding every needed host once."""
    data = run_json("place", "-w", "16", "--tp", "4", *source)
    assert len(data["hosts"]) == len(set(data["hosts"]))
    assert set(data["crossings"]) == set(data["groups"])


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (("place", "-w", "16"), ("place needs the job's hosts",)),
        (("place", "-w", "64", "--hosts", "n[1-4]", "--gpus-per-host", "4"), ("64", "16")),
        (
            ("place", "-w", "8", "--rank-offset", "8", "--hosts", "n[1-4]", "--gpus-per-host", "4"),
            ("rank_offset",),
        ),
        (
            ("place", "-w", "8", *HOSTS, "--launcher-order", "random"),
            ("random",),
        ),
        (
            (
                "place", "-w", "8", "--hosts", "n[1-4]", "--gpus-per-host", "4",
                "--write-hostfile", "no/such/dir/hosts.txt",
            ),
            ("--write-hostfile", "no/such/dir/hosts.txt"),
        ),
    ],
)  # fmt: skip
def test_bad_input(argv: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    """Exit 2 with one line naming the problem."""
    assert_invalid(argv, *fragments)


def test_place_with_a_model_reports_the_predicted_step_time() -> None:
    """--model prices both orders with topology.cost; the chosen one is never slower, and the
    figures are the cost model's own for the two host orders."""
    from topology import Topology, read_allocation
    from topology.cost import H100_NODE, MODELS, estimate

    args = ("-w", "256", "--tp", "4", "--ep", "8", "--etp", "1", "--pp", "4")
    data = run_json(
        "place", *args, "--allocation", str(RAGGED), "--launcher-order", "lexicographic",
        "--model", "mixtral-8x7b",
    )  # fmt: skip
    before, after = data["step_time"]["before"], data["step_time"]["after"]
    assert 0 < after <= before
    alloc = read_allocation(str(RAGGED))
    topo = Topology(256, tp=4, ep=8, etp=1, pp=4)
    chosen = alloc.with_order(data["hosts"]).rank_map(256)
    assert after == estimate(topo, chosen, MODELS["mixtral-8x7b"], H100_NODE).total
    code, text, _ = invoke("place", *args, "--allocation", str(RAGGED), "--model", "mixtral-8x7b")
    assert code == 0 and "predicted step time (topology.cost):" in text


def test_place_without_a_model_has_no_step_time() -> None:
    data = run_json("place", *LAYOUT, "--allocation", str(RAGGED))
    assert data["step_time"] == {"before": None, "after": None}


def test_text_says_the_exact_search_proved_a_small_allocation() -> None:
    """Up to 8 hosts the text says the order is optimal by exact search, and the JSON agrees."""
    argv = ("place", "-w", "16", "--tp", "8", "--allocation", str(DATA / "nvl72.json"))
    code, out, err = invoke(*argv, "--hosts", "node[1-4]")
    assert code == 0, err
    assert "optimal: exact search over every order of the 4 hosts" in out.splitlines()
    data = run_json(*argv, "--hosts", "node[1-4]")
    assert (data["optimality"]["exact"], data["optimality"]["optimal"]) == (True, True)


def test_text_and_json_name_the_entries_the_bound_proves() -> None:
    """Past 8 hosts: tp4 ep8 pp4 on the ragged NVL72 racks proves tp/etp and ep/cp on each tier
    by the lower bound; pp/dp/edp is unproven, with its count and bound in the text."""
    argv = ("place", "-w", "256", "--tp", "4", "--ep", "8", "--pp", "4", "--allocation")
    code, out, err = invoke(*argv, str(RAGGED))
    assert code == 0, err
    line = " ".join(out.split("optimal: ", 1)[1].split("\n\n", 1)[0].split())
    assert line.startswith("proven by the lower bound for tp/etp on rack, tp/etp on leaf, ")
    assert "unproven (64 hosts, past the exact search): pp/dp/edp on rack (" in line
    data = run_json(*argv, str(RAGGED))
    entries = data["optimality"]["key"]
    assert [(e["class"], e["tier"], e["proven"]) for e in entries[:4]] == [
        ("tp/etp", "rack", True),
        ("tp/etp", "leaf", True),
        ("ep/cp", "rack", True),
        ("ep/cp", "leaf", True),
    ]
    assert data["optimality"]["exact"] is False
    for entry in entries:
        assert entry["proven"] == (entry["crossing"] == entry["bound"])
        kinds = entry["class"].split("/")
        tier = entry["tier"]
        assert entry["crossing"] == sum(
            data["crossings"][k][tier]["after"] for k in kinds if k in data["crossings"]
        )
