"""Cluster: where each rank runs, checked against an independent model of the machine.

The model lays the machine out as a list: GPU slot ``i`` of node ``n`` of domain ``d``, built by
counting, not by the division the code uses.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Cluster, TopologyError

sizes = st.integers(min_value=1, max_value=24)


def machine(gpus_per_node: int, domain: int, ranks: int) -> list[tuple[int, int, int]]:
    """``(node, local gpu, domain)`` of ranks ``0 .. ranks - 1``, by walking the slots."""
    slots: list[tuple[int, int, int]] = []
    node = gpu = in_domain = domain_index = 0
    for _ in range(ranks):
        slots.append((node, gpu, domain_index))
        gpu += 1
        in_domain += 1
        if gpu == gpus_per_node:
            node, gpu = node + 1, 0
        if in_domain == domain:
            domain_index, in_domain = domain_index + 1, 0
    return slots


@given(gpus=sizes, nodes=st.none() | sizes, domain=st.none() | sizes)
def test_every_rank_lands_where_the_machine_puts_it(
    gpus: int, nodes: int | None, domain: int | None
) -> None:
    """node_of, local_gpu and domain_of agree with walking the machine's slots."""
    cluster = Cluster(gpus, nodes, domain)
    expected_domain = gpus if domain is None else domain
    assert cluster.domain_size == expected_domain
    assert cluster.world_size == (None if nodes is None else sum(gpus for _ in range(nodes)))
    for rank, (node, gpu, dom) in enumerate(machine(gpus, expected_domain, 3 * gpus + 5)):
        assert (cluster.node_of(rank), cluster.local_gpu(rank), cluster.domain_of(rank)) == (
            node,
            gpu,
            dom,
        )


@pytest.mark.parametrize("method", ["node_of", "local_gpu", "domain_of"])
@pytest.mark.parametrize(
    ("rank", "shown"),
    [
        (-1, "-1 (int)"),
        (1.0, "1.0 (float)"),
        ("3", "'3' (str)"),
        (True, "True (bool)"),
        (None, "None (NoneType)"),
    ],
)
def test_a_rank_that_is_not_a_non_negative_int_is_refused(
    method: str, rank: object, shown: str
) -> None:
    """Every lookup refuses a negative, float, string, bool or missing rank, naming it."""
    with pytest.raises(TopologyError) as caught:
        getattr(Cluster(8), method)(rank)
    assert str(caught.value) == f"rank must be a non-negative int, got {shown}"
    with pytest.raises(TopologyError, match=r"got 7\.5 \(float\)$"):
        getattr(Cluster(8), method)(7.5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"gpus_per_node": 8, "nodes": 0}, "nodes"),
        ({"gpus_per_node": 8, "nodes": -2}, "nodes"),
        ({"gpus_per_node": 8, "nvlink_domain": 0}, "nvlink_domain"),
        ({"gpus_per_node": 8, "nvlink_domain": 2.5}, "nvlink_domain"),
        ({"gpus_per_node": "8"}, "gpus_per_node"),
    ],
)
def test_sizes_must_be_positive_ints(kwargs: dict[str, object], name: str) -> None:
    """Each size field is checked and the error names the field."""
    with pytest.raises(TopologyError, match=name):
        Cluster(**kwargs)  # type: ignore[arg-type]


def test_unset_sizes_are_none_and_allowed() -> None:
    """nodes and nvlink_domain may be left open; rank 0 is always valid."""
    cluster = Cluster(4)
    assert cluster.nodes is None and cluster.nvlink_domain is None and cluster.world_size is None
    assert (cluster.node_of(0), cluster.local_gpu(0), cluster.domain_of(0)) == (0, 0, 0)
