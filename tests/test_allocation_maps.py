"""Hosts, tiers, allocations and rank maps: every validation message in full, and as_cluster.

The messages are worked out by hand from the rules each part documents. ``as_cluster`` is checked
against a brute force: it tries every domain size ``k`` (hosts per NVLink domain) and keeps the
smallest under which hosts ``i`` and ``j`` share a domain exactly when ``i // k == j // k``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Cluster, Host, Tier, TopologyError
from topology._machine.hosts import tier_index
from topology._machine.rankmap import RankMap


def exactly(message: str) -> Any:
    """pytest.raises for a TopologyError whose whole message is ``message``."""
    return pytest.raises(TopologyError, match=f"^{re.escape(message)}$")


A1 = Host("a", 1)
RACK, LEAF = Tier("rack", nvlink=True), Tier("leaf")

# ---- messages ----


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Host(" a", 1),
            "Host.name must be a non-empty name without surrounding blanks, got ' a'",
        ),
        (
            lambda: Host(3, 1),  # type: ignore[arg-type]
            "Host.name must be a string, got 3 (int)",
        ),
        (
            lambda: Host("", 1),
            "Host.name must be a non-empty name without surrounding blanks, got ''",
        ),
        (
            lambda: Host("rack[1]", 1),  # the rule every reader applies (check_host_name)
            "Host.name: host 'rack[1]' holds '[', which a host list reads as a range; a host "
            "name is a word of printable characters without blanks, '#', ',', '[', ']' or '=', "
            "as hostfiles and launchers read it; rename the host",
        ),
        (
            lambda: Host("node 7", 1),
            "Host.name: host 'node 7' holds a blank, which ends the name on a hostfile line; a "
            "host name is a word of printable characters without blanks, '#', ',', '[', ']' or "
            "'=', as hostfiles and launchers read it; rename the host",
        ),
        (
            lambda: Tier("t "),
            "Tier.name must be a non-empty name without surrounding blanks, got 't '",
        ),
        (lambda: Host("a", 0), "Host.gpus must be a positive int, got 0 (int)"),
        (
            lambda: Host("a", 65537),
            "Host.gpus must be at most 65536 (2**16), more GPUs than any host has, got 65537",
        ),
        (lambda: Host("a", True), "Host.gpus must be a positive int, got True (bool)"),
        (
            lambda: Host("a", 1, (" ",)),
            "Host.domains must be a tuple of domain names (non-empty strings) or None, got (' ',)",
        ),
        (
            lambda: Host("a", 1, "r"),
            "Host.domains must be a tuple of domain names (non-empty strings) or None, got 'r'",
        ),
        (
            lambda: Host("a", 1, ("r", 3)),
            "Host.domains must be a tuple of domain names (non-empty strings) or None, "
            "got ('r', 3)",
        ),
        (lambda: Tier("t", bandwidth=0), "Tier.bandwidth must be positive, got 0"),
        (
            lambda: Tier("t", bandwidth=-1.0),
            "Tier.bandwidth must be a finite number >= 0 or None, got -1.0",
        ),
        (
            lambda: Tier("t", latency=float("inf")),
            "Tier.latency must be a finite number >= 0 or None, got inf",
        ),
        (
            lambda: Tier("t", latency=True),
            "Tier.latency must be a finite number >= 0 or None, got True",
        ),
        (
            lambda: Tier("t", latency="1"),  # type: ignore[arg-type]
            "Tier.latency must be a finite number >= 0 or None, got '1'",
        ),
        (
            lambda: Allocation("ab"),
            "Allocation.hosts must be a non-empty tuple of Host, got 'ab'",
        ),
        (lambda: Allocation([]), "Allocation.hosts must be a non-empty tuple of Host, got ()"),
        (
            lambda: Allocation([A1, "b"]),
            "Allocation.hosts must be a non-empty tuple of Host, got (Host(name='a', gpus=1, "
            "domains=()), 'b')",
        ),
        (lambda: Allocation([A1], ["x"]), "Allocation.tiers must be a tuple of Tier, got ('x',)"),
        (lambda: Allocation([A1], "ab"), "Allocation.tiers must be a tuple of Tier, got 'ab'"),
        (
            lambda: Allocation(
                [Host("a", 1, (None,) * 5)],
                [Tier("a"), Tier("b"), Tier("a"), Tier("c"), Tier("b")],
            ),
            "tier names must differ; a, b appears twice",
        ),
        (
            lambda: Allocation([A1, Host("b", 1), Host("a", 2)]),
            "host 'a' is listed twice (again at position 2); "
            "list each host once with its GPU count",
        ),
        (
            lambda: Allocation([Host("a", 1, ("r",))]),
            "host 'a' names 1 domains for 0 tiers (none); give one per tier, None where unknown",
        ),
        (
            lambda: Allocation([Host("a", 1, (None, None)), Host("b", 1, ("r",))], [RACK, LEAF]),
            "host 'b' names 1 domains for 2 tiers (rack, leaf); give one per tier, "
            "None where unknown",
        ),
        (
            lambda: Allocation([A1, Host("b", 1)]).ordered("torchrun"),
            "launcher order must be one of listed, lexicographic, natural, slurm, got 'torchrun'",
        ),
        (
            lambda: Allocation([A1]).ordered(["natural"]),  # type: ignore[arg-type]
            "launcher order must be one of listed, lexicographic, natural, slurm, got ['natural']",
        ),
        (
            lambda: Allocation([A1]).ordered(3),  # type: ignore[arg-type]
            "launcher order must be one of listed, lexicographic, natural, slurm, got 3",
        ),
        (
            lambda: Allocation([A1, Host("b", 3)]).rank_map(5),
            "world_size must be at most 4, the GPUs of the 2 hosts, got 5",
        ),
        (
            lambda: Allocation([A1]).rank_map(0),
            "world_size must be a positive int, got 0 (int)",
        ),
        (
            lambda: Allocation([Host("a", 2)]).rank_map(True),
            "world_size must be a positive int, got True (bool)",
        ),
        (lambda: RankMap((), (), 1), "RankMap.hosts must name at least one host"),
        (
            lambda: RankMap((Host("a", 1, ("r",)),), (), 1),
            "host 'a' names 1 domains for 0 tiers; give one per tier, None where unknown",
        ),
        (
            lambda: RankMap((Host("a", 2),), (), 3),
            "RankMap of 1 hosts with 2 GPUs cannot hold world_size 3; every host must run a rank",
        ),
        (
            lambda: RankMap((Host("a", 2), Host("b", 3)), (), 2),
            "RankMap of 2 hosts with 5 GPUs cannot hold world_size 2; every host must run a rank",
        ),
        (
            lambda: Allocation([Host("a", 2), Host("b", 2)]).rank_map(4)[4],
            "rank 4 is out of range for 4 ranks; valid: 0 to 3",
        ),
        (
            lambda: Allocation([Host("a", 2)]).rank_map(2).location(-1),
            "rank -1 is out of range for 2 ranks; valid: 0 to 1",
        ),
        (
            lambda: Allocation([Host("a", 2)]).rank_map(2).node_of(True),
            "rank True is out of range for 2 ranks; valid: 0 to 1",
        ),
    ],
)
def test_messages(build: Any, message: str) -> None:
    """Each invalid part or query is named in full: the field, the rule and the value."""
    with exactly(message):
        build()


def test_limits_are_inclusive() -> None:
    """65536 GPUs, zero latency, a full last host and the last rank are all allowed."""
    assert Host("a", 65536).gpus == 65536
    assert Tier("t", latency=0).latency == 0
    assert Host("a", 1, ["r", None]).domains == ("r", None)
    ranks = RankMap((Host("a", 2), Host("b", 3)), (), 5)
    assert (ranks.world_size, ranks.location(4).local_gpu) == (5, 2)
    assert RankMap((Host("a", 2), Host("b", 3)), (), 3).nodes == (0, 0, 1)


def test_domain_ids_per_host_and_per_rank_golden() -> None:
    """Labels count from 0 by first appearance; an unknown domain gets a label of its own.

    Hosts a(r1), b(?), c(r1), d(r2) with 2, 1, 1, 2 GPUs: host labels 0, 1, 0, 2 (by hand).
    """
    hosts = [Host("a", 2, ("r1",)), Host("b", 1, (None,)), Host("c", 1, ("r1",))]
    ranks = Allocation([*hosts, Host("d", 2, ("r2",))], [RACK]).rank_map(5)
    assert ranks.host_domain_ids("rack") == (0, 1, 0, 2)
    assert ranks.host_domain_ids(0) == (0, 1, 0, 2)
    assert ranks.domain_ids("rack") == (0, 0, 1, 0, 2)
    assert ranks.domain_names("rack") == ("r1", None, "r2")


# ---- tier_index ----


@given(st.integers(1, 5), st.integers(-8, 8))
def test_tier_index_takes_names_and_indexes_from_either_end(count: int, index: int) -> None:
    """A valid index counts from either end like a list; a name is found by name."""
    tiers = tuple(Tier(f"t{i}") for i in range(count))
    if -count <= index < count:
        expected = list(range(count))[index]
        assert tier_index(tiers, index) == expected
        assert tier_index(tiers, f"t{expected}") == expected
    else:
        valid = ", ".join(f"t{i}" for i in range(count))
        with exactly(f"tier {index} is not in this allocation; valid: {valid}"):
            tier_index(tiers, index)


def test_tier_index_messages() -> None:
    """A bool, an unknown name, or any tier of a tier-less allocation is refused by name."""
    with exactly("tier True is not in this allocation; valid: rack, leaf"):
        tier_index((RACK, LEAF), True)
    with exactly("tier 'core' is not in this allocation; valid: rack, leaf"):
        tier_index((RACK, LEAF), "core")
    with exactly("tier 0 is not in this allocation; valid: none (the allocation has no tiers)"):
        tier_index((), 0)


# ---- as_cluster against a brute force ----


def brute_cluster(gpus: list[int], labels: list[str | None] | None, world: int) -> Cluster | None:
    """The Cluster placing every rank as the hosts do, by trying every domain size."""
    n = len(gpus)
    if len(set(gpus)) != 1 or world != gpus[0] * n:
        return None
    if labels is None:
        return Cluster(gpus[0], n)
    tags = [label if label is not None else ("unknown", i) for i, label in enumerate(labels)]
    for k in range(1, n + 1):
        if all((tags[i] == tags[j]) == (i // k == j // k) for i in range(n) for j in range(n)):
            return Cluster(gpus[0], n, None if k == 1 else k * gpus[0])
    return None


@settings(max_examples=150)
@given(st.data())
def test_as_cluster_matches_a_brute_force(data: st.DataObject) -> None:
    """as_cluster finds the uniform Cluster exactly when one places every rank alike."""
    n = data.draw(st.integers(1, 6))
    uniform = data.draw(st.booleans())
    gpus = (
        [data.draw(st.integers(1, 3))] * n
        if uniform
        else data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    )
    nvlink = data.draw(st.booleans())
    labels = [data.draw(st.sampled_from([None, "d1", "d2", "d3"])) for _ in range(n)]
    if data.draw(st.booleans()):  # consecutive runs of one size: the uniform case
        k = data.draw(st.integers(1, n))
        labels = [f"d{i // k}" for i in range(n)]
    tiers = (LEAF, Tier("nv", nvlink=True)) if nvlink else (LEAF,)
    hosts = [
        Host(f"h{i}", g, ("l", label) if nvlink else ("l",))
        for i, (g, label) in enumerate(zip(gpus, labels, strict=True))
    ]
    world = data.draw(st.sampled_from([sum(gpus), max(1, sum(gpus) - 1)]))
    ranks = Allocation(hosts, tiers).rank_map(world)
    expected = brute_cluster(
        [h.gpus for h in ranks.hosts], labels[: len(ranks.hosts)] if nvlink else None, world
    )
    assert ranks.as_cluster() == expected
