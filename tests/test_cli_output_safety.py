"""Outputs that cannot hang, lie or reach the terminal raw: output files that are not regular
files, output paths checked before anything is printed, a stdout that cannot be written, names
with control characters, names that are not UTF-8, and the hostfile ``place`` writes read back
by ``--host-order``.

Commands that could block run in a subprocess with a timeout, so a regression fails instead of
hanging the suite.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from topology._cli.main import main
from topology._cli.text import escape_controls

HOSTS = ("--hosts", "n[1-4]", "--gpus-per-host", "2", "-w", "8")

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def invoke(*argv: str, stdout: Any = None) -> tuple[int, str, str]:
    """Run ``topology ARGV`` in-process (stdout ``stdout`` if given); exit code, out, err."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout or out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run(*argv: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m topology ARGV`` in a subprocess that must end within ``timeout``."""
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(
        [sys.executable, "-m", "topology", *argv],
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"},
        check=False,
        **options,
    )


def one_error_line(err: str, *fragments: str) -> None:
    """Exactly one stderr line, no traceback, holding every fragment."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def allocation(tmp_path: Path, hosts: list[dict[str, Any]], tiers: tuple[str, ...] = ()) -> str:
    """An allocation JSON file of ``hosts`` (name, gpus, domains) and tiers named ``tiers``."""
    path = tmp_path / "alloc.json"
    data = {"tiers": [{"name": t} for t in tiers], "hosts": hosts}
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


# -- output files that are not regular files ------------------------------------------------


@needs_fifo
@pytest.mark.parametrize(
    "argv",
    [
        ("show", "-w", "8", "--svg"),
        ("show", "-w", "8", "--html"),
        ("place", *HOSTS, "--write-hostfile"),
    ],
)
def test_a_fifo_output_is_refused_without_blocking(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """--svg, --html and --write-hostfile to a FIFO nobody reads: exit 2 at once, nothing on
    stdout (it blocked forever before)."""
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    done = run(*argv, str(fifo), "--json", timeout=60)
    assert done.returncode == 2 and done.stdout == b""
    one_error_line(done.stderr.decode(), f"{argv[-1]} '{fifo}' is a FIFO, not a regular file")


@pytest.mark.parametrize("flag", ["--svg", "--html"])
def test_a_folder_output_is_refused(tmp_path: Path, flag: str) -> None:
    """An output path that is a folder is exit 2 naming it, nothing printed."""
    code, out, err = invoke("show", "-w", "8", flag, str(tmp_path))
    assert code == 2 and out == ""
    one_error_line(err, f"{flag} '{tmp_path}' is a directory, not a regular file")


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_a_device_output_is_refused() -> None:
    """--write-hostfile /dev/null is a character device: exit 2, not a silent no-op."""
    code, out, err = invoke("place", *HOSTS, "--write-hostfile", "/dev/null")
    assert code == 2 and out == ""
    one_error_line(err, "'/dev/null' is a character device, not a regular file")


# -- every output path checked before anything is printed ----------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("show", "-w", "8", "--json", "--html", "no/such/dir/page.html"),
        ("show", "-w", "8", "--json", "--svg", "no/such/dir/page.svg"),
        ("show", "-w", "8", "--svg", "no/such/dir/page.svg"),
        ("show", "-w", "8", "--json", "--svg", "ok.svg", "--html", "no/such/dir/page.html"),
        ("place", *HOSTS, "--json", "--write-hostfile", "no/such/dir/hosts"),
        ("place", *HOSTS, "--write-hostfile", "no/such/dir/hosts"),
    ],
)
def test_a_bad_output_path_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]
) -> None:
    """show --json --html BADPATH printed the JSON, then exited 2: now exit 2, stdout empty,
    and no other output file written."""
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(*argv)
    assert code == 2 and out == ""
    one_error_line(err, "no/such/dir", "does not exist")
    assert not (tmp_path / "ok.svg").exists()


def test_outputs_are_written_then_printed(tmp_path: Path) -> None:
    """A good --svg and --html are written and the JSON printed, as before."""
    svg, page = tmp_path / "a.svg", tmp_path / "a.html"
    code, out, _ = invoke("show", "-w", "8", "--json", "--svg", str(svg), "--html", str(page))
    assert code == 0 and json.loads(out)["layout"].startswith("tp1")
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    assert "<html" in page.read_text(encoding="utf-8")


# -- a stdout that cannot be written --------------------------------------------------------


class _Failing(io.StringIO):
    """A stdout whose every write fails with ``error``."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


@pytest.mark.parametrize(
    ("error", "fragment"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        (OSError(errno.EIO, "Input/output error"), "Input/output error"),
        (OSError(errno.EBADF, "Bad file descriptor"), "Bad file descriptor"),
    ],
)
@pytest.mark.parametrize("command", [("show", "-w", "8"), ("groups", "tp", "-w", "8", "--json")])
def test_a_failed_stdout_write_is_exit_2_naming_the_cause(
    error: OSError, fragment: str, command: tuple[str, ...]
) -> None:
    """A full disk or a broken stdout is exit 2 and one line (it was exit 3, 'internal')."""
    code, _, err = invoke(*command, stdout=_Failing(error))
    assert code == 2
    one_error_line(err, f"topology {command[0]}: error: cannot write to stdout: {fragment}")


def test_a_reader_that_went_away_ends_quietly() -> None:
    """A broken pipe (| head) still ends with exit 0 and nothing on stderr."""
    code, _, err = invoke("show", "-w", "8", stdout=_Failing(BrokenPipeError(errno.EPIPE, "")))
    assert code == 0 and err == ""


def test_a_closed_stdout_is_exit_2() -> None:
    """No stdout at all (started with fd 1 closed: sys.stdout is None) is exit 2, one line."""
    err = io.StringIO()
    saved = sys.stdout
    try:
        sys.stdout = None
        with contextlib.redirect_stderr(err):
            code = main(["show", "-w", "8"])
    finally:
        sys.stdout = saved
    assert code == 2
    one_error_line(err.getvalue(), "cannot write to stdout: it is closed")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_is_exit_2() -> None:
    """stdout on /dev/full (a full disk) is exit 2 naming ENOSPC, no 'Exception ignored'."""
    with open("/dev/full", "wb") as full:
        done = run("show", "-w", "8", stdout=full)
    assert done.returncode == 2
    one_error_line(done.stderr.decode(), "cannot write to stdout: No space left on device")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell redirection")
def test_a_closed_stdout_in_a_real_process_is_exit_2() -> None:
    """topology show >&- is exit 2 and one line (an AttributeError, exit 3, before)."""
    script = f"exec 1>&-; exec {sys.executable} -m topology show -w 8"
    done = subprocess.run(["sh", "-c", script], stderr=subprocess.PIPE, timeout=120, check=False)
    assert done.returncode == 2
    one_error_line(done.stderr.decode(), "cannot write to stdout: it is closed")


# -- names with control characters and names that are not UTF-8 -----------------------------

HOSTILE = [
    {"name": "n1", "gpus": 4, "domains": {"ra\x1b[2Jck": "r\x1b]0;owned\x07\r1"}},
    {"name": "n2", "gpus": 4, "domains": {"ra\x1b[2Jck": "r\u202e2"}},
]


@pytest.mark.parametrize("command", ["show", "check", "place"])
def test_control_characters_in_names_are_printed_escaped(tmp_path: Path, command: str) -> None:
    """Tier and domain names with ESC, BEL, CR or a bidi override never reach stdout raw: they
    are printed as repr spells them (host names cannot hold them: Host refuses them)."""
    path = allocation(tmp_path, HOSTILE, ("ra\x1b[2Jck",))
    code, out, _ = invoke(command, "--allocation", path, "-w", "8", "--tp", "4")
    assert code == 0
    assert not any(c in out for c in "\x1b\x07\r\u202e"), repr(out)
    assert "ra\\x1b[2Jck" in out and ("r\\u202e2" in out or command != "show")


@pytest.mark.parametrize("name", ["n\x1b]0;owned\x07", "n\u202e2"])
def test_a_host_name_with_control_characters_is_refused_escaped(tmp_path: Path, name: str) -> None:
    """A host named with ESC, BEL or a bidi override is exit 2, its name escaped in the one
    error line (Host applies the host-name rule)."""
    path = allocation(tmp_path, [{"name": name, "gpus": 4}])
    code, out, err = invoke("show", "--allocation", path)
    assert code == 2 and out == ""
    assert not any(c in err for c in "\x1b\x07\u202e"), repr(err)
    one_error_line(err, "Host.name: host 'n\\", "a control, format or blank character")


def test_control_characters_in_an_error_are_escaped() -> None:
    """An unknown flag spelt with ESC is one stderr line with the ESC escaped."""
    code, _, err = invoke("show", "-w", "8", "--t\x1b[2Jp", "2")
    assert code == 2 and "\x1b" not in err and "\\x1b" in err


def test_a_name_that_is_not_utf8_is_printed_escaped(tmp_path: Path) -> None:
    """A domain name holding a lone surrogate (a non-UTF-8 name) is exit 0 with the name escaped
    on a strict UTF-8 stdout (exit 3, UnicodeEncodeError, before); a host name holding one is
    exit 2 with the name escaped in the error (Host applies the host-name rule)."""
    path = tmp_path / "alloc.json"
    path.write_text(
        '{"tiers": [{"name": "r"}], "hosts": [{"name": "n1", "gpus": 8, '
        '"domains": {"r": "d\\udcff1"}}]}',
        encoding="utf-8",
    )
    done = run("show", "--allocation", str(path))
    assert done.returncode == 0, done.stderr
    assert b"d\\udcff1" in done.stdout
    path.write_text('{"hosts": [{"name": "n\\udcff1", "gpus": 8}]}', encoding="utf-8")
    done = run("show", "--allocation", str(path))
    assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
    assert b"host 'n\\udcff1' holds '\\udcff'" in done.stderr


def test_a_non_utf8_name_in_argv_is_escaped() -> None:
    """--hosts with a byte that is not UTF-8 (os.fsencode of a surrogate) is exit 2 naming the
    host escaped (Host applies the host-name rule), never a traceback or the raw byte."""
    done = run("show", "--hosts", "n\udcff[1-2]", "--gpus-per-host", "4")
    assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
    assert b"n\\udcff1" in done.stderr and b"\xff" not in done.stderr


def test_escape_controls_keeps_only_colour_sequences_when_asked() -> None:
    """On a terminal colour sequences stay; cursor moves, titles and bells never do."""
    text = "\x1b[1;31merror\x1b[0m \x1b[2J\x1b]0;t\x07 ok\n"
    assert escape_controls(text, keep_sgr=True) == (
        "\x1b[1;31merror\x1b[0m \\x1b[2J\\x1b]0;t\\x07 ok\n"
    )
    assert "\x1b" not in escape_controls(text)


# -- what --write-hostfile writes, --host-order reads back ----------------------------------

ROUND_TRIP_NAMES = ["gpu-node07.cluster", "n_1", "ÿ-node", "节点1", "a:b", "x'y", 'q"z', "back\\s"]


def test_write_hostfile_reads_back_through_host_order(tmp_path: Path) -> None:
    """Every name --write-hostfile accepts, --host-order reads back in the same order."""
    hosts = [{"name": name, "gpus": 2} for name in ROUND_TRIP_NAMES]
    path = allocation(tmp_path, hosts)
    out = tmp_path / "hosts.txt"
    code, placed, err = invoke(
        "place", "--allocation", path, "--json", "--write-hostfile", str(out)
    )
    assert code == 0, err
    order = json.loads(placed)["hosts"]
    code, shown, err = invoke("show", "--allocation", path, "--host-order", str(out), "--json")
    assert code == 0, err
    read = [h["name"] for h in json.loads(shown)["allocation"]["rank_map"]["hosts"]]
    assert read == order and sorted(order) == sorted(ROUND_TRIP_NAMES)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("n#2", "holds '#', which starts a comment"),
        ("n 2", "holds a blank"),
        ("n[2]", "holds '['"),
        ("n\x1b2", "holds '\\x1b'"),
        ("\ufeffn2", "holds '\\ufeff'"),
    ],
)
def test_write_hostfile_refuses_a_name_it_cannot_read_back(
    tmp_path: Path, name: str, fragment: str
) -> None:
    """A host whose name a hostfile line cannot hold is exit 2 before placing; no file (the
    allocation's Host refuses it, by the rule --write-hostfile applies)."""
    path = allocation(tmp_path, [{"name": "n1", "gpus": 2}, {"name": name, "gpus": 2}])
    out = tmp_path / "hosts.txt"
    code, printed, err = invoke("place", "--allocation", path, "--write-hostfile", str(out))
    assert code == 2 and printed == "" and not out.exists()
    one_error_line(err, "hosts[1]: Host.name: host ", fragment, "rename the host")


def test_host_order_refuses_a_byte_order_mark(tmp_path: Path) -> None:
    """A --host-order file saved with a BOM is exit 2 naming the mark (its first host was
    '\\ufeffn1', silently not n1, before)."""
    order = tmp_path / "order.txt"
    order.write_bytes(b"\xef\xbb\xbfn2\nn1\n")
    code, out, err = invoke("check", *HOSTS, "--host-order", str(order))
    assert code == 2 and out == ""
    one_error_line(err, "starts with a UTF-8 byte-order mark")


def test_hostfile_refuses_a_byte_order_mark(tmp_path: Path) -> None:
    """--hostfile saved with a BOM is exit 2 naming the mark and the fix."""
    hostfile = tmp_path / "hosts"
    hostfile.write_bytes(b"\xef\xbb\xbfnode1 slots=4\nnode2 slots=4\n")
    code, out, err = invoke(
        "check", "--hostfile", str(hostfile), "--launcher-order", "lexicographic"
    )
    assert code == 2 and out == ""
    one_error_line(err, "starts with a UTF-8 byte-order mark", "sed -i")
