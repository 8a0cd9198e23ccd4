"""The JSON forms of a check: Report, Finding, Placement and Communicators (docs/cli.md).

Each ``to_dict()`` must survive ``json.dumps`` and repeat the object's own facts; the facts are
checked against a count over every group (nodes = rank // gpus_per_node), not against the code.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Cluster, Finding, Topology, check
from topology._args import format_choices
from topology._preflight.communicators import communicators
from topology._preflight.placement import placement
from topology.strategies import topologies

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings.default.max_examples


def as_json(value: object) -> object:
    """The value after a JSON round trip."""
    return json.loads(json.dumps(value))


@settings(max_examples=min(60, BUDGET))
@given(topologies(max_world_size=32), st.sampled_from((1, 2, 3, 4, 8)), st.data())
def test_placement_to_dict_repeats_brute_force_facts(
    topo: Topology, gpus: int, data: st.DataObject
) -> None:
    """Placement.to_dict: kind, size, group count, most/fewest nodes and the example group."""
    kind = data.draw(st.sampled_from(topo.kinds))
    domain = data.draw(st.none() | st.sampled_from((2, 4, 16)))
    cluster = Cluster(gpus, nvlink_domain=domain)
    groups = [tuple(g) for g in topo.groups(kind)]
    nodes = [len({r // gpus for r in g}) for g in groups]
    domains = [len({r // cluster.domain_size for r in g}) for g in groups]
    row = as_json(placement(topo, cluster, kind).to_dict())
    assert isinstance(row, dict)
    example = tuple(row.pop("example"))
    assert example in [g[:64] for g in groups]
    assert row == {
        "kind": kind,
        "size": len(groups[0]),
        "groups": len(groups),
        "nodes": max(nodes),
        "nodes_min": min(nodes),
        "best_nodes": -(-len(groups[0]) // gpus),
        "domains": max(domains),
        "intra_node": max(nodes) == 1,
        "intra_domain": max(domains) == 1,
        "example_size": len(groups[0]),
        "exact": True,
    }


def test_placement_example_is_cut_at_64_ranks() -> None:
    """A 128-rank group shows its first 64 ranks and says how many it has."""
    row = placement(Topology(128, tp=128), Cluster(8), "tp").to_dict()
    assert row["example"] == list(range(64)) and row["example_size"] == 128


def test_finding_to_dict_and_repr() -> None:
    """Finding.to_dict cuts the example at 64 ranks; repr shows severity, code and message."""
    finding = Finding("warning", "partial-node", "one node runs 4 of 8 GPUs", range(100))
    assert as_json(finding.to_dict()) == {
        "severity": "warning",
        "code": "partial-node",
        "message": "one node runs 4 of 8 GPUs",
        "example": list(range(64)),
        "example_size": 100,
    }
    assert finding.ok and not Finding("error", "x", "y").ok
    text = repr(finding)
    assert text.startswith("Finding('warning', 'partial-node', 'one node runs 4 of 8 GPUs', ")
    assert "100 ranks" in text and len(text) < 200
    assert repr(Finding("info", "c", "m", (3, 4))) == "Finding('info', 'c', 'm', (3, 4))"


def test_long_finding_messages_are_cut_in_repr() -> None:
    """A 5,000-character message prints at most 600 of its characters."""
    text = repr(Finding("info", "c", "x" * 5000))
    assert 600 <= len(text) < 700 and text.count("x") == 599


def test_report_to_dict_repeats_its_parts() -> None:
    """Report.to_dict holds ok, the topology, the cluster, findings, placements, counts."""
    topo = Topology(32, tp=8, order="dp-tp")
    cluster = Cluster(8, nodes=4, nvlink_domain=8)
    report = check(topo, cluster)
    data = as_json(report.to_dict())
    assert isinstance(data, dict)
    assert data["ok"] is False and report.ok is False
    assert Topology.from_dict(data["topology"]) == topo
    assert data["cluster"] == {"gpus_per_node": 8, "nodes": 4, "nvlink_domain": 8}
    assert [f["code"] for f in data["findings"]] == list(report.codes())
    assert data["findings"][0]["severity"] == "error"
    assert [p["kind"] for p in data["placement"]] == list(topo.kinds)
    assert data["communicators"] == as_json(communicators(topo).to_dict())
    assert [f.code for f in report.errors] == ["tp-crosses-nodes"]
    assert all(f.severity == "warning" for f in report.warnings)
    assert report.placement("mp").kind == "tp-pp"


def test_report_repr_is_short() -> None:
    """repr(Report) names ok, the topology, the cluster and the finding codes."""
    report = check(Topology(16, tp=16), Cluster(8))
    text = repr(report)
    assert text.startswith("Report(ok=False, topology=Topology(16, tp=16), cluster=Cluster(")
    assert "tp-larger-than-node" in text and f"<{len(report.placements)} kinds>" in text


def test_communicators_to_dict() -> None:
    """Communicators.to_dict nests the strategy counts and maps shared kinds to earlier ones."""
    counts = communicators(Topology(8, tp=2, pp=2))
    assert as_json(counts.to_dict()) == {
        "per_rank_min": counts.per_rank_min,
        "per_rank_max": counts.per_rank_max,
        "strategies": {"all": counts.all, "local": counts.local},
        "megatron": 77,  # hand count in tests/test_check.py
        "shared": {kind: earlier for kind, earlier in counts.shared},
    }
    assert ("dp", "dp-cp") in counts.shared  # cp = 1: dp-cp is dp


def test_format_choices_cuts_long_lists() -> None:
    """format_choices joins with commas and keeps the first 11 and the last of a long list."""
    assert format_choices([1, 2, 4, 8]) == "1, 2, 4, 8"
    assert format_choices(range(12)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11"
    assert format_choices(range(13)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ..., 12"
    assert format_choices(range(5), limit=3) == "0, 1, ..., 4"
