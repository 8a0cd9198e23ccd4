"""Inputs that cannot mislead the ``topology`` command: flags, config files, exit codes."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Topology
from topology._cli import check as check_command
from topology._cli import common
from topology._cli.main import main

LIMIT = 2**40
"""The largest integer a flag or a config value may hold."""

REPO = Path(__file__).resolve().parent.parent


def invoke(*argv: str) -> tuple[int, str, str]:
    """Run ``topology ARGV`` in-process; return the exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m topology ARGV`` in a subprocess (the caller's environment plus ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "topology", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1", **env},
    )


def assert_invalid(code: int, err: str, *fragments: str) -> None:
    """Exit 2 and exactly one stderr line, no traceback, holding every fragment."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def config(tmp_path: Path, content: str, name: str = "layout.json") -> str:
    """Write ``content`` to ``tmp_path/name`` and return the path."""
    path = tmp_path / name
    path.write_text(content)
    return str(path)


# -- two spellings of one setting -------------------------------------------------------------

SPELLINGS = {
    "world_size": ("-w", "--world-size"),
    "tp": ("--tp", "--tensor-model-parallel-size"),
    "pp": ("--pp", "--pipeline-model-parallel-size"),
    "cp": ("--cp", "--context-parallel-size"),
    "ep": ("--ep", "--expert-model-parallel-size"),
    "etp": ("--etp", "--expert-tensor-parallel-size"),
    "vpp": ("--vpp", "--virtual-pipeline-model-parallel-size"),
    "dist_opt_instances": ("--dist-opt-instances", "--num-distributed-optimizer-instances"),
    "hcp_sizes": ("--hcp-sizes", "--hierarchical-context-parallel-sizes"),
    "dp": ("--dp",),
    "gtp": ("--gtp",),
    "egtp": ("--egtp",),
    "rank_offset": ("--rank-offset",),
    "order": ("--order",),
    "gpus_per_node": ("--gpus-per-node",),
    "nodes": ("--nodes",),
    "nvlink_domain": ("--nvlink-domain",),
    "max_communicators": ("--max-communicators",),
}
"""Every spelling of each setting ``check`` takes (written out, not read from the parser)."""


def _value(setting: str, number: int) -> str:
    """The text of a flag value for ``setting`` built from ``number``."""
    if setting == "hcp_sizes":
        return f"{number},2"
    if setting == "order":
        return ("tp-dp", "dp-tp")[number % 2]
    return str(number)


@given(
    setting=st.sampled_from(sorted(SPELLINGS)),
    data=st.data(),
    a=st.integers(1, 16),
    b=st.integers(1, 16),
)
def test_two_values_for_one_setting_are_refused_unless_equal(
    setting: str, data: st.DataObject, a: int, b: int
) -> None:
    """Any two spellings (or one twice) of a setting: exit 2 naming both iff the values differ."""
    first = data.draw(st.sampled_from(SPELLINGS[setting]))
    second = data.draw(st.sampled_from(SPELLINGS[setting]))
    one, two = _value(setting, a), _value(setting, b)
    base = [] if setting == "gpus_per_node" else ["--gpus-per-node", "8"]
    base += [] if setting == "world_size" else ["-w", "8"]
    code, _, err = invoke("check", first, one, second, two, *base)
    if one != two:
        assert_invalid(code, err, f"{first} {one} and {second} {two} disagree")
    else:
        assert "disagree" not in err


def test_tp_spellings_that_disagree_name_both(capsys: pytest.CaptureFixture[str]) -> None:
    """--tp 8 --tensor-model-parallel-size 16 is exit 2 naming both flags and both values."""
    assert main(["show", "--tp", "8", "--tensor-model-parallel-size", "16", "-w", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topology show: error: --tp 8 and --tensor-model-parallel-size 16 ")


def test_equal_spellings_give_the_same_layout() -> None:
    """Two spellings with equal values build the same layout as one spelling."""
    once = invoke("groups", "dp", "-w", "16", "--pp", "2", "--json")
    twice = invoke(
        "groups", "dp", "-w", "16", "--pp", "2", "--pipeline-model-parallel-size", "2", "--json"
    )
    assert once[0] == twice[0] == 0 and once[1] == twice[1]


def test_plan_world_size_spellings_that_disagree_are_refused() -> None:
    """plan -w 8 --world-size 16 is exit 2."""
    code, _, err = invoke(
        "plan", "-w", "8", "--world-size", "16", "--gpus-per-node", "8", "--model", "llama-7b"
    )
    assert_invalid(code, err, "-w 8 and --world-size 16 disagree")


# -- positive integer flags -------------------------------------------------------------------


@given(st.integers(-(2**45), 2**45))
def test_int_flags_accept_exactly_one_to_two_to_the_forty(number: int) -> None:
    """A size flag accepts n iff 1 <= n <= 2**40."""
    parse = common.int_type("tp")
    if 1 <= number <= LIMIT:
        assert parse(str(number)) == number
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"^tp must be "):
            parse(str(number))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (("check", "-w", "8", "--gpus-per-node", "8", "--max-communicators", "0"), "max_comm"),
        (("plan", "-w", "8", "--gpus-per-node", "8", "--model", "llama-7b", "--top", "0"), "top"),
        (("plan", "-w", "8", "--gpus-per-node", "8", "--model", "llama-7b", "--max-tp", "0"), "tp"),
        (("plan", "-w", "0", "--gpus-per-node", "8", "--model", "llama-7b"), "world_size"),
        (("check", "-w", "8", "--gpus-per-node", "8", "--nodes", "0"), "nodes"),
        (("check", "-w", "8", "--gpus-per-node", "8", "--nvlink-domain", "-4"), "nvlink_domain"),
        (("show", "-w", "8", "--tp", "0"), "tp must be a positive int, got 0 (int)"),
        (
            ("show", "-w", "8", "--rank-offset", "-1"),
            "rank_offset must be a non-negative int, got -1 (int)",
        ),
        (("show", "-w", "8", "--cp", "4", "--hcp-sizes", "4,0"), "hcp size"),
        (("show", "-w", str(LIMIT + 1)), "at most 1099511627776 (2**40)"),
        (("show", "-w", "9" * 5000), "world_size must be a positive int"),
    ],
)
def test_int_flags_out_of_range_are_one_clear_line(argv: tuple[str, ...], fragment: str) -> None:
    """A zero, negative, huge or 5,000-digit integer flag is exit 2 naming the flag."""
    code, out, err = invoke(*argv)
    assert_invalid(code, err, fragment)
    assert out == "" and len(err) < 400


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (("show", "-w", "8", "--tp", "1_6"), "tp must be a positive int in plain digits 0-9"),
        (("show", "-w", "8", "--tp", "\uff12"), "got '\uff12'"),  # fullwidth 2
        (("show", "-w", "8", "--tp", "\u0662"), "got '\u0662'"),  # Arabic-Indic 2
        (("show", "-w", "8", "--tp", "+2"), "got '+2'"),
        (("show", "-w", "8", "--tp", " 2"), "got ' 2'"),
        (("show", "-w", "8", "--tp", ""), "got ''"),
        (("show", "-w", "16", "--cp", "4", "--hcp-sizes", "2,,2"), "got '2,,2'"),
        (("show", "-w", "16", "--cp", "4", "--hcp-sizes", "2,2,"), "got '2,2,'"),
        (("show", "-w", "16", "--cp", "4", "--hcp-sizes", "2 2"), "got '2 2'"),
        (("rank", "1_0", "-w", "16"), "rank must be a non-negative int in plain digits 0-9"),
        (("groups", "tp", "-w", "8", "--limit", "\u0663"), "limit must be a non-negative int"),
        (("show", "--hosts", "n[1-2]", "--gpus-per-host", "\uff18"), "gpus_per_host must be"),
    ],
)
def test_sizes_are_plain_ascii_digits_without_empty_items(
    argv: tuple[str, ...], fragment: str
) -> None:
    """An underscore, a sign, a blank, a non-ASCII digit or an empty list item is exit 2."""
    code, out, err = invoke(*argv)
    assert_invalid(code, err, fragment)
    assert out == ""


def test_a_rank_beyond_two_to_the_forty_is_read_with_an_offset() -> None:
    """rank takes global ranks up to rank_offset + world_size - 1, beyond 2**40."""
    code, out, _ = invoke("rank", str(LIMIT + 3), "-w", "8", "--rank-offset", str(LIMIT), "--json")
    assert code == 0 and json.loads(out)["rank"] == LIMIT + 3


# -- config values ------------------------------------------------------------------------------

ILL_TYPED = st.one_of(
    st.text(max_size=5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.integers(min_value=1 - 10**30, max_value=0),
    st.integers(min_value=LIMIT + 1, max_value=10**30 - 1),  # longer: a parse error (below)
    st.lists(st.integers(1, 8), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-(10**6), 10**6), max_size=2),  # short ints
)
"""JSON values that are not a size (a positive int up to 2**40)."""


@given(value=ILL_TYPED, key=st.sampled_from(["tp", "pp", "cp", "ep", "dist_opt_instances"]))
def test_ill_typed_config_sizes_are_refused_even_when_a_flag_overrides_them(
    value: object, key: str
) -> None:
    """A config size that is not a positive int is exit 2 naming key and file, flag or no flag."""
    with tempfile.TemporaryDirectory() as folder:
        path = config(Path(folder), json.dumps({"world_size": 8, key: value}))
        flag = "--" + key.replace("_", "-")
        code, _, err = invoke("groups", "dp", "--config", path, flag, "1")
    assert_invalid(code, err, f"--config {path!r}: {key} must be")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"world_size": 8, "tp": "8"}', "tp must be a positive int, got '8' (str)"),
        ('{"world_size": 8, "tp": 2.0}', "tp must be a positive int, got 2.0 (float)"),
        ('{"world_size": 8, "tp": true}', "tp must be a positive int, got True (bool)"),
        ('{"world_size": 8, "hcp_sizes": [[2, 2]]}', "hcp_sizes[0] must be a positive int"),
        ('{"world_size": 8, "embedding_stages": [0, "x"]}', "embedding_stages[1] must be an int"),
        ('{"world_size": 8, "order": 5}', "order must be a string"),
        ('{"world_size": 8, "rank_offset": -1}', "rank_offset must be a non-negative int"),
        ('{"world_size": 8, "topolgy": {"tp": 2}}', "unknown table 'topolgy'"),
        ('{"topology": {"world_size": 8}, "cluster": 8}', "'cluster' must be a table"),
        ('{"cluster": {"gpus_per_node": "8"}}', "cluster.gpus_per_node must be a positive int"),
        ('{"cluster": {"gpus": 8}}', "unknown cluster field 'gpus'"),
        ('{"topology": {"world_size": 8, "tpp": 2}}', "unknown topology field 'tpp'"),
        (f'{{"world_size": 8, "rank_offset": {LIMIT + 1}}}', "at most 1099511627776 (2**40)"),
    ],
)
def test_bad_config_values_name_the_key_and_the_file(
    tmp_path: Path, content: str, fragment: str
) -> None:
    """Ill-typed values, unknown keys and tables are exit 2 naming the key and the file."""
    path = config(tmp_path, content)
    flags = ("--tp", "1", "--rank-offset", "0", "--order", "tp-dp", "--hcp-sizes", "1")
    code, _, err = invoke("check", "--config", path, "-w", "8", "--gpus-per-node", "8", *flags)
    assert_invalid(code, err, f"--config {path!r}", fragment)


def test_toml_config_values_are_checked(tmp_path: Path) -> None:
    """A TOML config with tp = "8" is exit 2 naming topology.tp and the file."""
    path = config(tmp_path, '[topology]\nworld_size = 8\ntp = "8"\n', "layout.toml")
    code, _, err = invoke("show", "--config", path, "--tp", "2")
    assert_invalid(code, err, f"--config {path!r}: topology.tp must be a positive int")


def test_bound_is_inclusive(tmp_path: Path) -> None:
    """2**40 passes the config's integer bound (the layout then fails), 2**40 + 1 does not."""
    at = invoke("show", "--config", config(tmp_path, f'{{"world_size": 8, "tp": {LIMIT}}}'))
    over = invoke("show", "--config", config(tmp_path, f'{{"world_size": 8, "tp": {LIMIT + 1}}}'))
    assert_invalid(at[0], at[2], "world_size 8 is not divisible by tp(1099511627776)")
    assert_invalid(over[0], over[2], "tp must be at most 1099511627776 (2**40)")


def test_complete_config_must_be_valid_even_if_flags_fix_it(tmp_path: Path) -> None:
    """A config holding an invalid layout is refused although --tp makes the result valid."""
    path = config(tmp_path, '{"world_size": 12, "tp": 8}')
    code, _, err = invoke("groups", "dp", "--config", path, "--tp", "4")
    assert_invalid(code, err, "holds an invalid layout", "world_size 12", "tp(8)")


def test_to_dict_config_changed_by_flags_is_accepted(tmp_path: Path) -> None:
    """A to_dict() file with derived dp/etp/stages still takes --tp, --pp and -w overrides."""
    topo = Topology(64, tp=2, pp=4, cp=2, ep=2, vpp=2)
    path = config(tmp_path, json.dumps(topo.to_dict()))
    code, out, err = invoke("groups", "dp", "--config", path, "--tp", "4", "--pp", "2", "--json")
    assert code == 0, err
    expected = Topology(64, tp=4, pp=2, cp=2, ep=2, vpp=2)
    assert json.loads(out)["groups"] == [list(g) for g in expected.groups("dp")]


def test_config_schema_covers_every_topology_field() -> None:
    """Every field Topology takes has a rule in the config schema, and nothing else does."""
    fields = {field.alias for field in attrs.fields(Topology) if field.init}
    assert set(common.TOPOLOGY_SCHEMA) == fields


# -- files that are not small regular files ---------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("flag", ["--config", "--model"])
def test_fifo_is_refused_without_blocking(tmp_path: Path, flag: str) -> None:
    """A FIFO as --config or --model is exit 2, not a process blocked forever."""
    fifo = tmp_path / "layout.json"
    os.mkfifo(fifo)
    argv = ["plan", "-w", "8", "--gpus-per-node", "8", "--model", str(fifo)]
    if flag == "--config":
        argv = ["show", "-w", "8", "--config", str(fifo)]
    try:
        done = run(*argv)
    except subprocess.TimeoutExpired:
        pytest.fail(f"topology blocked on a FIFO given as {flag}")
    assert_invalid(done.returncode, done.stderr, "layout.json", "not a regular file")


def test_directory_is_refused(tmp_path: Path) -> None:
    """A directory as --config is exit 2 saying it is a directory."""
    code, _, err = invoke("show", "--config", str(tmp_path))
    assert_invalid(code, err, "is a directory, not a regular file")


def test_file_over_one_mebibyte_is_refused(tmp_path: Path) -> None:
    """A valid JSON config padded past 1 MiB is exit 2 naming the limit."""
    path = config(tmp_path, '{"world_size": 8}' + " " * (1 << 20))
    code, _, err = invoke("show", "--config", path)
    assert_invalid(code, err, "larger than 1 MiB")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"world_size": ' + "9" * 4400 + "}", "an integer of 4400 digits"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ('{"world_size": NaN}', "NaN is not a number JSON allows"),
        ('{"world_size": Infinity}', "Infinity is not a number JSON allows"),
        ('{"world_size": -Infinity}', "-Infinity is not a number JSON allows"),
        ('{"world_size": 8, "tp": 2, "tp": 4}', "key 'tp' appears twice"),
        (b"\xff\xfe".decode("latin-1"), "not UTF-8"),
    ],
)
def test_hostile_json_is_one_clear_line(tmp_path: Path, content: str, fragment: str) -> None:
    """Huge integers, deep nesting, NaN/Infinity, duplicate keys and bad bytes are exit 2."""
    path = tmp_path / "layout.json"
    path.write_bytes(content.encode("latin-1"))
    code, _, err = invoke("show", "--config", str(path))
    assert_invalid(code, err, fragment)


def test_hostile_toml_is_one_clear_line(tmp_path: Path) -> None:
    """A 12,000-bit hex integer and deep nesting in TOML are exit 2."""
    big = config(tmp_path, "world_size = 0x" + "f" * 3000 + "\n", "big.toml")
    deep = config(tmp_path, "x = " + "[" * 100_000 + "]" * 100_000 + "\n", "deep.toml")
    assert_invalid(*invoke("show", "--config", big)[::2], "got <int of about 3613 digits>")
    assert_invalid(*invoke("show", "--config", deep)[::2], "nests too deeply")


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "m", "layers": ' + "9" * 4400 + "}",
        "[" * 100_000 + "]" * 100_000,
        '{"name": "m", "parameters": Infinity}',
    ],
)
def test_hostile_model_file_is_one_clear_line(tmp_path: Path, content: str) -> None:
    """A model file with a huge integer, deep nesting or Infinity is exit 2 naming the file."""
    path = config(tmp_path, content, "model.json")
    code, _, err = invoke("plan", "-w", "8", "--gpus-per-node", "8", "--model", path)
    assert_invalid(code, err, "model file", "model.json")


def test_huge_integer_end_to_end_has_no_traceback(tmp_path: Path) -> None:
    """Through a real process, a 4,400-digit integer is exit 2 with one line, no traceback."""
    path = config(tmp_path, '{"world_size": ' + "9" * 4400 + "}")
    done = run("check", "--config", path, "--gpus-per-node", "8")
    assert_invalid(done.returncode, done.stderr, "an integer of 4400 digits")


# -- internal errors ---------------------------------------------------------------------------

CHECK = ("check", "--world-size", "16", "--tp", "2", "--gpus-per-node", "8")


def _boom(*args: object, **kwargs: object) -> object:
    raise ZeroDivisionError("boom\nsecond line")


def test_internal_error_is_exit_3_and_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception in a command is exit 3 with one line inviting a report."""
    monkeypatch.delenv("TOPOLOGY_DEBUG", raising=False)
    monkeypatch.setattr(check_command, "check", _boom)
    code, out, err = invoke(*CHECK)
    assert code == common.EXIT_INTERNAL == 3 and out == ""
    assert err == (
        "topology check: internal error: ZeroDivisionError: boom second line; "
        "please report this with the command line\n"
    )


def test_internal_error_traceback_with_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """TOPOLOGY_DEBUG=1 lets the internal error propagate (with its traceback)."""
    monkeypatch.setenv("TOPOLOGY_DEBUG", "1")
    monkeypatch.setattr(check_command, "check", _boom)
    with pytest.raises(ZeroDivisionError, match="boom"):
        invoke(*CHECK)


def test_internal_error_end_to_end() -> None:
    """In a real process an internal error exits 3 with one stderr line and no traceback."""
    code = (
        "import sys\n"
        "import topology._cli.check as command\n"
        "def boom(*a, **k): raise RuntimeError('boom')\n"
        "command.check = boom\n"
        "from topology._cli.main import main\n"
        f"sys.exit(main({list(CHECK)!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOPOLOGY_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "topology check: internal error: RuntimeError: boom; please report this with the "
        "command line"
    ]


def test_usage_errors_return_2_and_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    """main returns 2 for a usage error and 0 for --help instead of raising SystemExit."""
    assert main(["show", "--bogus"]) == 2
    assert main(["--help"]) == 0
    assert "3 internal error" in capsys.readouterr().out


def test_docs_list_every_exit_code() -> None:
    """docs/cli.md's exit-code table has a row for each of 0, 1, 2 and 3."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]
    assert {"0", "1", "2", "3"} <= set(rows)
    assert "TOPOLOGY_DEBUG" in text
