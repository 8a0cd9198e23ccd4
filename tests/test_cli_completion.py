"""Shell completion: the script ``topology completion bash`` prints, loaded into a real bash,
completes commands, flags, choices, presets and kind names from the real parser.

The bash tests run the installed ``topology`` entry point the way bash does on a TAB (the
completion function sets ``COMP_LINE``/``COMP_POINT`` and calls the program), so they test the
script, argcomplete's protocol and our parser together. zsh and fish are not installed here; their
scripts are checked for the hook that calls ``topology`` and the same answers are checked through
argcomplete's protocol, which is what those scripts use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from topology import Topology
from topology._cli import completion
from topology._cli.main import build_parser, main
from topology._megatron.kinds import canonical_kind
from topology.cost import HARDWARE, MODELS

try:
    import argcomplete  # noqa: F401  (only whether it is installed)
except ImportError:  # pragma: no cover - setup.sh installs it; CI must have it
    if os.environ.get("CI"):
        raise AssertionError(
            "argcomplete is not installed in CI: scripts/setup.sh installs it"
        ) from None
    pytest.skip("argcomplete (extra 'cli') is not installed", allow_module_level=True)

Tab = Callable[[str], list[str]]

BIN = Path(sys.executable).parent
ENTRY = BIN / "topology"

# Load the script, then do what bash does on TAB: call the completion function registered for
# `topology` with the words of the line, and print the candidates one per line.
BASH_TAB = r"""
eval "$(topology completion bash)"
fn=$(complete -p topology | sed -E 's/.* -F ([^ ]+) .*/\1/')
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
"$fn" topology "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def bash_tab(line: str) -> list[str]:
    """The candidates bash offers for TAB at the end of ``line``."""
    if not ENTRY.exists():  # pragma: no cover - the package is always installed by setup.sh
        pytest.fail(f"the topology entry point is not installed at {ENTRY}")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", BASH_TAB, "bash", line],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,  # a hang guard only
    )
    assert done.stderr == ""
    return [word.strip() for word in done.stdout.splitlines() if word.strip()]


def protocol(line: str) -> list[str]:
    """The candidates argcomplete's protocol (which the zsh and fish scripts use) returns.

    The shell runs ``topology`` with ``_ARGCOMPLETE`` set and reads the answer from a file
    (``_ARGCOMPLETE_STDOUT_FILENAME``, argcomplete's temp-file mode) separated by ``IFS``.
    """
    with tempfile.TemporaryDirectory() as folder:
        answer = Path(folder) / "answer"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line))}
        env |= {"_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
        done = subprocess.run([str(ENTRY)], env=env, capture_output=True, text=True, timeout=600)
        assert (done.returncode, done.stdout) == (0, ""), done.stderr
        words = answer.read_text().split("\n")
    return [word.strip() for word in words if word.strip()]


@pytest.fixture(params=["bash", "protocol"])
def tab(request: pytest.FixtureRequest) -> Tab:
    if request.param == "bash" and shutil.which("bash") is None:  # pragma: no cover
        pytest.skip("bash is not installed")
    return bash_tab if request.param == "bash" else protocol


def test_commands_complete_by_prefix(tab: Tab) -> None:
    assert tab("topology s") == ["show", "simulate"]
    assert set(tab("topology ")) >= {"show", "groups", "rank", "check", "plan", "completion"}


def test_flags_complete_after_a_dash(tab: Tab) -> None:
    offered = tab("topology show --t")
    assert set(offered) == {"--tp", "--tensor-model-parallel-size", "--topograph"}
    assert not any(word.startswith("-") for word in tab("topology groups "))


def test_choices_presets_and_kinds_complete(tab: Tab) -> None:
    assert tab("topology completion ") == ["bash", "zsh", "fish"]
    assert tab("topology plan --model ") == list(MODELS)
    assert tab("topology simulate --hardware ") == list(HARDWARE)
    offered = tab("topology groups tp-")
    # Megatron's combined tensor groups, each of which `topology groups` accepts.
    assert {"tp-pp", "tp-dp", "tp-cp", "tp-dp-cp"} <= set(offered)
    moe = Topology(16, tp=2, pp=2, ep=2)
    for name in offered:
        assert name.startswith("tp-")
        assert moe.kind(name).name


def test_every_offered_kind_is_accepted() -> None:
    moe = Topology(32, tp=2, pp=2, cp=2, ep=2, dist_opt_instances=2)
    # The GTP kinds need gtp / egtp > 1, which Megatron allows only with one dist-opt instance.
    gtp = Topology(32, tp=2, pp=2, cp=2, ep=2, gtp=2, egtp=2)
    for name in completion.kind_names():
        layout = gtp if canonical_kind(name) in gtp.kinds else moe
        assert layout.kind(name).name  # raises TopologyError for a name the commands refuse


def test_a_completion_request_runs_no_command() -> None:
    # protocol() checks that the program printed nothing and exited 0: the layout was not shown
    assert protocol("topology show -w 8 --tp 2 ") == []  # only flags fit, and no dash was typed


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_each_shell_gets_a_script_that_calls_topology(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "_ARGCOMPLETE" in script and "topology" in script


def test_without_argcomplete_the_command_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "argcomplete", None)  # import now raises ImportError
    assert main(["completion", "bash"]) == 2
    assert "pip install 'rank-topology[cli]'" in capsys.readouterr().err
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    with pytest.raises(SystemExit) as done:
        completion.complete(build_parser())
    assert done.value.code == 0
