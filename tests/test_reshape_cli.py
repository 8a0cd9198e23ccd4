"""``topology reshape``: the table of kinds, the moves, the hostfile, the launch lines, the JSON
object; hosts by name on an allocation, exit codes, hostfiles read back."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_cli_json_schema import _assert_valid
from topology import read_hostfile
from topology._cli.hostfiles import HOSTFILE_FORMATS, command_lines, hostfile_text
from topology._cli.main import main
from topology._machine.readers.hostfile import parse_hostfile

ARGS = ["reshape", "-w", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _flat(text: str) -> str:
    """``text`` with wrapped lines joined: every run of blanks and newlines one space."""
    return " ".join(text.split())


def test_text_lists_kinds_moves_and_the_new_hostfile(capsys: pytest.CaptureFixture[str]) -> None:
    """Losing host 1 drops one replica: dp 4 -> 3, the hostfile skips hosts 1 and 5, which is
    idle, and the output says the global batch changes."""
    code, out, _ = _run(capsys, *ARGS, "--lost", "1")
    assert code == 0
    text = _flat(out)
    assert "policy drop: tp8·cp1·ep1·dp4·pp2 (tp fastest) -> tp8·cp1·ep1·dp3·pp2" in text
    assert "8 ranks lost on 1 host (host1); 48 survivors active, 48 keep their shard" in out
    assert "the global batch changes, 4 -> 3 micro-batches a step" in text
    assert "dp                  0      16    0        0" in out
    assert "new hostfile (6 hosts, 48 ranks; node rank = line):\n  host0 slots=8\n  host2" in out
    assert "idle hosts (1): host5" in out
    assert "torchrun --nnodes=6 --nproc-per-node=8 --node-rank=$NODE_RANK" in out


def test_spares_name_the_ranks_that_fetch_their_shard(capsys: pytest.CaptureFixture[str]) -> None:
    """A spare host 8 takes host 1's place; its ranks fetch their shard from a replica."""
    code, out, _ = _run(capsys, *ARGS, "--lost-ranks", "9", "--spares", "8", "--policy", "spares")
    assert code == 0
    assert "new rank 8 on host8 <- old rank 0 on host0" in out
    assert "  host0 slots=8\n  host8 slots=8\n  host2 slots=8" in out


def test_json_has_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """--json gives schema, new, rank_of, keeps_shard, active and communicators."""
    code, out, _ = _run(capsys, *ARGS, "--lost-ranks", "8-15", "--json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == "rank-topology/reshape/2"
    assert data["new"]["world_size"] == 48 and data["rank_of"][8] is None
    assert (data["keeps_shard"], data["active"]) == (48, 48)
    assert data["communicators"]["tp"] == {"reuse": 6, "trim": 0, "rebuild": 0}


def test_bad_ranges_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A backwards range is a usage error that names it."""
    assert main([*ARGS, "--lost-ranks", "7-3"]) == 2
    assert "range '7-3' runs backwards" in capsys.readouterr().err


ALLOCATION = """
[[tiers]]
name = "rack"

[[hosts]]
names = "node[1-4]"
gpus = 8
domains = { rack = "r1" }

[[hosts]]
name = "spare-far"
gpus = 8
domains = { rack = "r2" }

[[hosts]]
name = "spare-near"
gpus = 8
domains = { rack = "r1" }
"""

FOUR_GPU_HOSTS = """
[[tiers]]
name = "rack"

[[hosts]]
names = "node[1-16]"
gpus = 4
domains = { rack = "r1" }
"""


def _file(tmp_path: Path, text: str, name: str = "alloc.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_allocation_spares_prefer_the_lost_host_rack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The allocation's hosts after the layout's are spares; the one in the lost rack wins."""
    alloc = _file(tmp_path, ALLOCATION)
    code, out, _ = _run(
        capsys, "reshape", "-w", "32", "--tp", "8", "--lost", "1", "--allocation", alloc
    )
    assert code == 0 and "policy spares" in out
    assert "  node1 slots=8\n  spare-near slots=8\n  node3 slots=8\n  node4 slots=8" in out
    assert "idle hosts (1): spare-far" in out


def test_the_allocation_gives_the_gpus_per_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On 4-GPU hosts a lost host is 4 ranks, dp 16 -> 15, and the hostfile says slots=4."""
    alloc = _file(tmp_path, FOUR_GPU_HOSTS)
    code, out, _ = _run(
        capsys, "reshape", "-w", "64", "--tp", "4", "--allocation", alloc, "--lost", "node4"
    )
    assert code == 0
    assert "4 ranks lost on 1 host (node4)" in out and "dp 16 -> 15" in out
    assert "  node1 slots=4\n  node2 slots=4\n  node3 slots=4\n  node5 slots=4" in out
    assert "slots=8" not in out


def test_gpus_per_node_with_an_allocation_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--gpus-per-node next to an allocation is refused in one line, as check and show do."""
    alloc = _file(tmp_path, FOUR_GPU_HOSTS)
    code, out, err = _run(
        capsys, "reshape", "-w", "64", "--tp", "4", "--allocation", alloc, "--lost", "node4",
        "--gpus-per-node", "8",
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "--gpus-per-node describes a uniform cluster" in err


def test_no_host_size_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Without an allocation, reshape needs --gpus-per-node."""
    code, _, err = _run(capsys, "reshape", "-w", "64", "--tp", "4", "--lost", "1")
    assert code == 2 and "reshape needs the hosts: pass --gpus-per-node G" in err


def test_hosts_by_name_by_host_list_and_by_number_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--lost node[3-5,9] is --lost 2-4,8 (node ranks), and so are the spares."""
    alloc = _file(tmp_path, FOUR_GPU_HOSTS)
    base = ["reshape", "-w", "48", "--tp", "4", "--allocation", alloc, "--json"]
    _, by_name, _ = _run(capsys, *base, "--lost", "node[3-5,9]", "--spares", "node[13-16]")
    _, by_number, _ = _run(capsys, *base, "--lost", "2-4,8", "--spares", "12-15")
    assert json.loads(by_name) == json.loads(by_number)
    data = json.loads(by_name)
    assert data["lost_hosts"] == ["node3", "node4", "node5", "node9"]
    assert data["policy"] == "spares" and data["idle_hosts"] == []


def test_launcher_order_numbers_the_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    """Host numbers are node ranks in the launcher's order: lexicographic puts node10 second."""
    base = ["reshape", "-w", "16", "--tp", "4", "--hosts", "node[1-4],node10", "--gpus-per-host"]
    _, out, _ = _run(
        capsys, *base, "4", "--launcher-order", "lexicographic", "--lost", "1", "--json"
    )
    data = json.loads(out)
    assert data["lost_hosts"] == ["node10"] and data["policy"] == "spares"
    assert [h["name"] for h in data["hosts"]] == ["node1", "node4", "node2", "node3"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--lost", "node99"],
            "lost host 'node99' is not in the allocation; its hosts: node[1-16]",
        ),
        (["--lost", "node[1-2"], "argument --lost: host list 'node[1-2' has '[' without ']'"),
        (["--lost", "1", "--spares", "gpu1"], "spare host 'gpu1' is not in the allocation"),
        (["--lost", "node1", "--spares", "node2"], "spares must be distinct hosts outside"),
        (["--lost", "3", "--write-hostfile", "/"], "--write-hostfile '/' is a directory"),
        (["--lost", "3", "--format", "mpi"], "unknown --format value 'mpi'"),
    ],
)
def test_bad_hosts_are_exit_2_naming_the_valid_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    """Unknown names, a host list that does not parse, a spare inside the layout, an output
    that is no file, an unknown format: exit 2, one line, nothing on stdout."""
    alloc = _file(tmp_path, FOUR_GPU_HOSTS)
    code, out, err = _run(capsys, "reshape", "-w", "32", "--tp", "4", "--allocation", alloc, *flags)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err


def test_written_hostfiles_read_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--write-hostfile writes every host in node order: the hostfile format reads back with
    read_hostfile (names and slots), the slurm one is a line per task; the text says where."""
    hosts = ["--hosts", "node[1-32]", "--gpus-per-host", "4"]
    base = ["reshape", "-w", "128", "--tp", "4", *hosts, "--lost", "node2"]
    plain, slurm = tmp_path / "new.hostfile", tmp_path / "new.slurm"
    _, out, _ = _run(capsys, *base, "--write-hostfile", str(plain), "--json")
    hosts = json.loads(out)["hosts"]
    back = read_hostfile(str(plain))
    assert [(h.name, h.gpus) for h in back.hosts] == [(h["name"], h["slots"]) for h in hosts]
    _, out, _ = _run(capsys, *base, "--write-hostfile", str(slurm), "--format", "slurm")
    lines = slurm.read_text().splitlines()
    assert lines == [h["name"] for h in hosts for _ in range(h["slots"])]
    text = _flat(out.replace(" \\\n", " "))
    assert f"all of them in {slurm}" in text and f"wrote {slurm} (slurm format" in text
    assert f"SLURM_HOSTFILE={slurm} srun --nodes=31 --ntasks=124" in text


def test_a_long_hostfile_preview_says_where_the_rest_is(capsys: pytest.CaptureFixture[str]) -> None:
    """2,040 hosts: the first and last 8 are shown, then where all of them are."""
    _, out, _ = _run(capsys, "reshape", "-w", "16384", "--tp", "8", "--pp", "8",
                     "--gpus-per-node", "8", "--lost", "3")  # fmt: skip
    assert "new hostfile (2040 hosts, 16320 ranks; node rank = line):" in out
    assert "… 2024 more (all of them: --write-hostfile FILE or --json)" in out
    assert "  host2047 slots=8\nidle hosts (7): host[259, 515, 771, 1027, 1283, 1539, 1795]" in out


def test_ragged_allocation_relaunches_with_slots_per_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hosts of 8, 4 and 4 GPUs: the hostfile keeps each host's slots, torchrun takes $SLOTS,
    and the output validates against the schema."""
    hostfile = _file(tmp_path, "big slots=8\na slots=4\nb slots=4\n", "ragged")
    code, out, _ = _run(
        capsys, "reshape", "-w", "16", "--tp", "4", "--hostfile", hostfile, "--lost", "a", "--json"
    )
    data = json.loads(out)
    assert code == 0
    _assert_valid("reshape", data)
    assert [(h["name"], h["slots"]) for h in data["hosts"]] == [("big", 8), ("b", 4)]
    assert data["launch"]["nproc_per_node"] is None
    assert "--nproc-per-node=$SLOTS" in data["launch"]["torchrun"]


def test_json_names_hosts_sources_idle_and_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a spare: the spare's ranks fetch from a named host, the launch lines carry the
    computed node and task counts and the hostfile path; the document matches the schema."""
    alloc = _file(tmp_path, ALLOCATION)
    path = tmp_path / "out.slurm"
    args = ["reshape", "-w", "32", "--tp", "8", "--allocation", alloc, "--lost", "node2",
            "--write-hostfile", str(path), "--format", "slurm", "--json"]  # fmt: skip
    code, out, _ = _run(capsys, *args)
    data = json.loads(out)
    assert code == 0
    _assert_valid("reshape", data)
    assert data["sources"][0] == {"rank": 8, "host": "spare-near", "from_rank": 0,
                                  "from_host": "node1"}  # fmt: skip
    launch = data["launch"]
    assert (launch["nnodes"], launch["nproc_per_node"], launch["ntasks"]) == (4, 8, 32)
    assert launch["hostfile"] == str(path) and launch["master_addr"] == "node1"
    words = shlex.split(launch["srun"])
    assert f"SLURM_HOSTFILE={path}" in words and "--ntasks=32" in words
    assert shlex.split(launch["torchrun"])[1:3] == ["--nnodes=4", "--nproc-per-node=8"]


def test_text_fits_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line of the text output fits 80 columns (COLUMNS=80), launch lines included."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    _file(tmp_path, ALLOCATION)
    for args in (
        [*ARGS, "--lost", "1"],
        ["reshape", "-w", "16384", "--tp", "8", "--pp", "8", "--gpus-per-node", "8", "--lost",
         "3", "--accumulation", "3"],
        ["reshape", "-w", "32", "--tp", "8", "--allocation", "alloc.toml", "--lost", "node2",
         "--write-hostfile", "new.slurm", "--format", "slurm"],
    ):  # fmt: skip
        _, out, _ = _run(capsys, *args)
        assert max(map(len, out.splitlines())) <= 80, out


# -- the shared writers ----------------------------------------------------------------------

NAMES = st.from_regex(r"[a-z][a-z0-9.-]{0,12}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(NAMES, st.integers(1, 16)), min_size=1, max_size=12, unique_by=lambda x: x[0]
    )
)
def test_hostfile_formats_read_back(hosts: list[tuple[str, int]]) -> None:
    """What the hostfile format writes, the project's reader reads back (names, order,
    slots); the slurm format holds each host once per task, the order format once, in node
    order."""
    back = parse_hostfile(hostfile_text(hosts, "hostfile"))
    assert [(h.name, h.gpus) for h in back.hosts] == hosts
    lines = hostfile_text(hosts, "slurm").splitlines()
    assert lines == [name for name, slots in hosts for _ in range(slots)]
    assert hostfile_text(hosts, "order").splitlines() == [name for name, _ in hosts]
    assert set(HOSTFILE_FORMATS) == {"hostfile", "slurm", "order"}


def _script(word: str) -> str:
    """A word with each of its lines stripped (a script's indentation, which bash ignores)."""
    return "\n".join(line.strip() for line in word.split("\n"))


SCRIPT = "'export A=$B\n  exec python train.py'"
WORDS = st.from_regex(r"[A-Za-z0-9=_./-]{1,20}", fullmatch=True) | st.sampled_from(
    ["--node-rank=$NODE_RANK", "--nproc-per-node=$SLOTS", "a" * 90, SCRIPT]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=14), st.integers(40, 120))
def test_command_lines_are_the_same_command(words: list[str], width: int) -> None:
    """The wrapped lines, joined as a shell joins them (a backslash-newline is a blank), are
    the command's words again, and each line fits ``width`` unless one word alone is wider."""
    command = " ".join(words)
    lines = command_lines(command, width)
    joined = "\n".join(lines).replace(" \\\n", " ")
    assert list(map(_script, shlex.split(joined))) == list(map(_script, shlex.split(command)))
    widest = max(len(part) for w in words for part in w.split("\n")) + 10
    assert all(len(line) <= max(width, widest) for line in lines)


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        # tp 4 over 36 ranks on five 8-GPU hosts, no tiers: place keeps the listed order and
        # fills node1..node4 (32 ranks) and 4 ranks of node5
        ("order", "node1\nnode2\nnode3\nnode4\nnode5\n"),
        ("hostfile", "".join(f"node{h} slots=8\n" for h in range(1, 5)) + "node5 slots=4\n"),
        ("slurm", "".join(f"node{h}\n" * 8 for h in range(1, 5)) + "node5\n" * 4),
    ],
)
def test_place_writes_each_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str, expected: str
) -> None:
    """``place --write-hostfile FILE --format F``: the chosen hosts in node order, as each
    launcher reads them (the ranks each host runs: the last one only 4)."""
    monkeypatch.chdir(tmp_path)
    argv = ["place", "-w", "36", "--tp", "4", "--hosts", "node[1-5]", "--gpus-per-host", "8"]
    assert main([*argv, "--write-hostfile", "out", "--format", form]) == 0
    assert (tmp_path / "out").read_text() == expected
