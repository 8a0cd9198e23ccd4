"""Host names a hostfile can hold, and the byte-order mark: what ``place --write-hostfile``
writes, ``--host-order`` and ``--hostfile`` read back as the same names, and a file that starts
with ``EF BB BF`` is refused (as Slurm, mpirun and DeepSpeed would misread it), never stripped.

Law first: every name :func:`host_name_problem` accepts is one hostfile line that reads back as
itself through both readers; every name it refuses is refused where a hostfile is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from topology import TopologyError
from topology._machine.readers.hostfile import parse_hostfile, read_hostfile
from topology._machine.readers.slurm_topology import read_slurm_topology
from topology._machine.textfile import (
    BOM,
    check_host_name,
    host_name_problem,
    lines,
    read_text,
)

NAMES = st.one_of(
    st.text(min_size=1, max_size=12),
    st.from_regex(r"[a-z][a-z0-9.\-_]{0,10}", fullmatch=True),
)
"""Any text, and names shaped like real host names (most of which are fine)."""


def _read_back(text: str) -> list[str] | None:
    """The names the hostfile reader reads from ``text``; None when it refuses the text."""
    try:
        return [h.name for h in parse_hostfile(text, gpus_per_host=1).hosts]
    except TopologyError:
        return None


@given(NAMES)
@example("node1")
@example("a,b")
@example("a[1-2]")
@example("a b")
@example("n#1")
@example("\ufeffnode1")
@example("n\x1b1")
@example("n\x1c1")
def test_an_accepted_name_is_one_hostfile_line_that_reads_back(name: str) -> None:
    """A name the rule accepts reads back from its line as itself, through the line reader
    (--host-order) and the hostfile reader (--hostfile); a refused one never reads back as
    itself from a hostfile (refused, or read as other names)."""
    text = f"{name}\n"
    if host_name_problem(name) is None:
        assert lines(text) == [(1, name)]
        assert _read_back(text) == [name]
    else:
        assert _read_back(text) != [name]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("node 1", "holds a blank"),
        ("node#1", "holds '#'"),
        ("node,1", "holds ','"),
        ("node[1]", "holds '['"),
        ("node=1", "holds '='"),
        ("node\x1b[31m1", r"holds '\x1b', a control, format or blank character"),
        ("\ufeffnode1", r"holds '\ufeff'"),
        ("node\r", r"holds '\r'"),
        ("node\u2028x", r"holds '\u2028'"),
        ("node\u202e1", r"holds '\u202e'"),
        ("node\udcff", r"holds '\udcff'"),
        ("node\xa01", r"holds '\xa0'"),
        ("", "is empty"),
    ],
)
def test_names_a_hostfile_cannot_hold_are_refused_with_the_reason(name: str, fragment: str) -> None:
    """Blanks, hostfile and host-list syntax, control and format characters, lone surrogates."""
    with pytest.raises(TopologyError) as error:
        check_host_name(name, "--write-hostfile")
    message = str(error.value)
    assert message.startswith("--write-hostfile: host ") and fragment in message
    assert message.endswith("rename the host") and "\n" not in message


def test_a_hostfile_line_with_a_control_character_is_refused() -> None:
    """An ESC inside a hostfile's host name is refused naming the line, not read as a name."""
    with pytest.raises(TopologyError, match=r"hostfile line 2: host 'b\\x1bc' holds '\\x1b'"):
        parse_hostfile("a slots=1\nb\x1bc slots=1\n")


@pytest.mark.parametrize("reader", ["hostfile", "host-order text", "topology.conf"])
def test_a_byte_order_mark_is_refused_naming_the_fix(tmp_path: Path, reader: str) -> None:
    """A file that starts with EF BB BF is refused with the sed that removes it (never read as
    a first host named '\\ufeffnode1', which sorts after every plain name)."""
    path = tmp_path / "hosts"
    if reader == "topology.conf":
        path.write_bytes(BOM + b"SwitchName=s1 Nodes=node[1-2]\n")
        with pytest.raises(TopologyError, match="starts with a UTF-8 byte-order mark"):
            read_slurm_topology(str(path), gpus_per_host=4, hosts="node[1-2]")
        return
    path.write_bytes(BOM + b"node1 slots=4\nnode2 slots=4\n")
    if reader == "hostfile":
        with pytest.raises(TopologyError) as error:
            read_hostfile(str(path))
    else:
        with pytest.raises(TopologyError) as error:
            read_text(str(path), "--host-order 'hosts'")
    message = str(error.value)
    assert "starts with a UTF-8 byte-order mark (EF BB BF)" in message
    assert message.endswith("sed -i '1s/^\\xEF\\xBB\\xBF//' FILE")


def test_a_file_without_a_mark_reads_as_before(tmp_path: Path) -> None:
    """The same hostfile saved without the mark reads node1 first."""
    path = tmp_path / "hosts"
    path.write_bytes(b"node1 slots=4\nnode2 slots=4\n")
    assert [h.name for h in read_hostfile(str(path)).hosts] == ["node1", "node2"]
