"""``Report.render()``: the text ``topology check`` prints, owned by the report itself.

Laws first (every finding and every placement row is in the text, in report order, and the
verdict agrees with ``report.ok``), then one golden report worked out by hand from the rules in
``docs/cli.md`` (``node = rank // G``; Megatron's group counts from the formula in
``megatron_new_group_calls``).
"""

from __future__ import annotations

import re

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Cluster, Finding, Report, Topology, check
from topology.strategies import topologies

MARKS = {"error": "ERROR", "warning": "warn ", "info": "info "}
RANK = {"error": 0, "warning": 1, "info": 2}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@st.composite
def reports(draw: st.DrawFn) -> Report:
    """A check of a small topology on a cluster that may be too small, too large or odd-sized."""
    topo = draw(topologies(max_world_size=48))
    gpus = draw(st.integers(1, 12))
    nodes = draw(st.none() | st.integers(1, 12))
    domain = draw(st.none() | st.integers(1, 24))
    budget = draw(st.integers(1, 40))
    cluster = Cluster(gpus_per_node=gpus, nodes=nodes, nvlink_domain=domain)
    return check(topo, cluster, max_communicators=budget)


def finding_lines(text: str) -> list[str]:
    """The lines of ``text`` that start with a severity mark."""
    return [line for line in text.splitlines() if line[:5] in MARKS.values()]


# -- laws ----------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(reports())
def test_every_finding_is_a_line_in_report_order(report: Report) -> None:
    """Each finding is one line `MARK code: message`, in the order of report.findings."""
    expected = [f"{MARKS[f.severity]} {f.code}: {f.message}" for f in report.findings]
    assert finding_lines(report.render()) == expected


@settings(max_examples=60, deadline=None)
@given(reports())
def test_errors_come_before_warnings_before_info(report: Report) -> None:
    """Severity marks never go back up the scale from top to bottom of the text."""
    ranks = [
        RANK[s]
        for line in finding_lines(report.render())
        for s, m in MARKS.items()
        if line.startswith(m)
    ]
    assert ranks == sorted(ranks)


@settings(max_examples=60, deadline=None)
@given(reports())
def test_verdict_line_matches_ok(report: Report) -> None:
    """The last line is `check ok` exactly when report.ok, else it counts the errors."""
    last = report.render().splitlines()[-1]
    errors = sum(f.severity == "error" for f in report.findings)
    assert last == ("check ok" if report.ok else f"check FAILED ({errors} error(s))")
    assert report.ok == (errors == 0)


@settings(max_examples=60, deadline=None)
@given(reports())
def test_example_lines_follow_errors_and_warnings_only(report: Report) -> None:
    """A non-info finding with an example is followed by its first 8 ranks; info never is."""
    lines = report.render().splitlines()
    for finding in report.findings:
        at = lines.index(f"{MARKS[finding.severity]} {finding.code}: {finding.message}")
        follower = lines[at + 1]
        if finding.example and finding.severity != "info":
            head = ", ".join(str(r) for r in list(finding.example)[:8])
            tail = ", …" if len(finding.example) > 8 else ""
            assert follower == f"      e.g. group [{head}{tail}]"
        else:
            assert not follower.startswith("      e.g. group")


@settings(max_examples=60, deadline=None)
@given(reports())
def test_table_has_one_row_per_placement_in_order(report: Report) -> None:
    """After the `kind size groups nodes best in-node` header comes one row per placement."""
    lines = report.render().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kind "))
    assert lines[header].split() == ["kind", "size", "groups", "nodes", "best", "in-node"]
    rows = lines[header + 1 : header + 1 + len(report.placements)]
    for line, row in zip(rows, report.placements, strict=True):
        words = line.split()
        assert words[:5] == [
            row.kind,
            str(row.size),
            str(row.groups),
            str(row.nodes),
            str(row.best_nodes),
        ]
        assert words[5] == ("yes" if row.intra_node else "no")
        assert line.endswith("(sampled)") == (not row.exact)
    assert lines[header + 1 + len(report.placements) :] == ["", lines[-1]]


@settings(max_examples=40, deadline=None)
@given(reports())
def test_color_only_adds_ansi_styles(report: Report) -> None:
    """Plain text has no escape codes; coloured text minus its styles is the plain text."""
    plain, colored = report.render(), report.render(color=True)
    assert "\x1b" not in plain and plain.endswith("\n") and not plain.endswith("\n\n")
    assert ANSI.sub("", colored) == plain
    assert ("\x1b[" in colored) == bool(report.findings)


def test_info_findings_show_no_example() -> None:
    """An info finding's example group is left out of the text; a warning's is shown."""
    report = check(Topology(8, tp=2), Cluster(gpus_per_node=8))
    extra = (Finding("warning", "w", "shown", (0, 1)), Finding("info", "i", "hidden", (2, 3)))
    lines = attrs.evolve(report, findings=report.findings + extra).render().splitlines()
    at = lines.index("warn  w: shown")
    assert lines[at + 1 : at + 4] == ["      e.g. group [0, 1]", "info  i: hidden", ""]


# -- golden ----------------------------------------------------------------------------------


def test_golden_tp_larger_than_a_partial_node() -> None:
    """tp12 over 12 ranks on 8-GPU nodes: tp is too large, one node is half used, 141 calls.

    The tp group [0..11] spans nodes 0 and 1 (2 = ⌈12 / 8⌉, so it does not also cross);
    ranks 8..11 are the partial node. Every kind containing tp is the single 12-rank group
    (etp = tp, reported once), the rest are singletons: one distinct communicator per rank.
    Megatron (W = 12, gloo companions, one dist-opt instance): dp-cp 12·2 + dp 12·2 + cp 12
    + mp 1 + tp 1 + pp/embd/pos 3·12 + tp-dp-cp, tp-dp, tp-cp 3 + ep 12 + etp, etp-ep,
    etp-ep-pp 3 + edp 12·2 + 1 = 141. NCCL memory: one communicator at the default 688 MB;
    NVLS: node 0 holds 8 ranks of the one 12-rank group, node 1 holds 4: one per node.
    """
    report = check(Topology(12, tp=12), Cluster(gpus_per_node=8))
    expected = """\
tp12·cp1·ep1·dp1·pp1 (tp fastest) on 8 GPUs/node (open node count)

ERROR tp-larger-than-node: tp(12) is larger than one 8-GPU node, so every tp collective \
crosses the network; use tp <= 8 and grow another axis instead
      e.g. group [0, 1, 2, 3, 4, 5, 6, 7, …]
warn  partial-node: world_size 12 is not a multiple of gpus_per_node 8: one node runs only 4 \
of its 8 GPUs; use a multiple of 8
      e.g. group [8, 9, 10, 11]
info  communicators: each rank joins 1 to 1 distinct communicators; strategy 'all' makes 1 \
new_group calls, 'local' at most 1 per rank, Megatron's initialize_model_parallel 141; about \
0.688 GB of GPU memory for NCCL on the busiest rank at 688 MB per communicator \
(NVIDIA/nccl#964; give your measured figure as nccl_memory); at most 1 communicators have two \
or more ranks in one node, of 128 NVLS multicast groups

kind                    size   groups  nodes  best in-node
dp-cp                      1       12      1     1 yes
dp                         1       12      1     1 yes
cp                         1       12      1     1 yes
tp-pp                     12        1      2     2 no
tp                        12        1      2     2 no
pp                         1       12      1     1 yes
embedding                  1       12      1     1 yes
position-embedding         1       12      1     1 yes
tp-dp-cp                  12        1      2     2 no
tp-dp                     12        1      2     2 no
tp-cp                     12        1      2     2 no
ep                         1       12      1     1 yes
etp                       12        1      2     2 no
etp-ep                    12        1      2     2 no
etp-ep-pp                 12        1      2     2 no
edp                        1       12      1     1 yes

check FAILED (1 error(s))
"""
    assert report.render() == expected
    assert report.render(color=True).startswith(
        expected.split("ERROR")[0] + "\x1b[1;31mERROR\x1b[0m "
    )


@settings(max_examples=40, deadline=None)
@given(report=reports(), width=st.sampled_from([80, 100, 120]))
def test_render_with_width_fits_and_keeps_every_word(report: Report, width: int) -> None:
    """render(width=W): no line over W columns, and the same words as the one-line render."""
    wrapped = report.render(width=width)
    assert all(len(line) <= width for line in wrapped.splitlines())
    assert wrapped.split() == report.render().split()


def test_render_with_width_hangs_under_the_code() -> None:
    """A wrapped finding continues six columns in, under its code, and keeps its colour mark."""
    report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
    lines = report.render(width=50).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("ERROR tp-larger-than-node:"))
    assert len(lines[at + 1]) - len(lines[at + 1].lstrip()) == 6
    colored = report.render(width=50, color=True).splitlines()
    assert ANSI.sub("", colored[at]) == lines[at] and colored[at].startswith("\x1b[1;31mERROR")
